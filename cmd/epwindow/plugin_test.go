package main

import (
	"strings"
	"testing"
)

// Started as kubectl-epwindow (by kubectl, which executes the plugin file,
// or through a symlink of that name) the tool calls itself "kubectl
// epwindow"; under any other name, "epwindow".
func TestAppName(t *testing.T) {
	for argv0, want := range map[string]string{
		"epwindow":                            "epwindow",
		"/usr/local/bin/epwindow":             "epwindow",
		"./bin/epwindow":                      "epwindow",
		"kubectl-epwindow":                    "kubectl epwindow",
		"/usr/local/bin/kubectl-epwindow":     "kubectl epwindow",
		"/home/me/.krew/bin/kubectl-epwindow": "kubectl epwindow",
		"kubectl-epwindow.exe":                "kubectl epwindow",
		"/usr/local/bin/kubectl-epwindow-old": "epwindow",
		"/usr/local/bin/kubectl":              "epwindow",
		"/tmp/go-build123/b001/epwindow.test": "epwindow",
	} {
		if got := appName(argv0); got != want {
			t.Errorf("appName(%q) = %q, want %q", argv0, got, want)
		}
	}
}

// As a kubectl plugin, help shows commands that work as typed: "kubectl
// epwindow measure ...", in the usage line and in the examples, and leaves
// names that are not commands (the epwindow-<id> namespace) alone.
func TestPluginHelp(t *testing.T) {
	app := newApp("kubectl epwindow")
	var out strings.Builder
	app.Writer = &out
	if err := app.Run([]string{"kubectl-epwindow", "measure", "--help"}); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{
		"kubectl epwindow measure - delete probe pods",
		"   kubectl epwindow measure --url http://ingress.example.internal",
		`"kubectl epwindow manifests"`,
		"a namespace epwindow-<id>",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("measure --help lacks %q:\n%s", want, help)
		}
	}
	for _, line := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "epwindow measure") {
			t.Errorf("an example still says epwindow: %q", line)
		}
	}

	out.Reset()
	app = newApp("epwindow")
	app.Writer = &out
	if err := app.Run([]string{"epwindow", "measure", "--help"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "   epwindow measure --url") {
		t.Errorf("as epwindow, the examples changed:\n%s", out.String())
	}
}
