package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runAsBinary makes the test binary act as epwindow itself when the shell
// scripts under test run it (see TestBashCompletes).
const runAsBinary = "EPWINDOW_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsBinary) == "1" {
		main()
		os.Exit(0)
	}
	peakHelpers()
	os.Exit(m.Run())
}

// The scripts are valid shell: bash -n, and zsh -n where zsh is installed.
func TestCompletionScriptsParse(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			script, err := runApp(t, "completion", shell)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(script, "--generate-bash-completion") {
				t.Errorf("the %s script does not ask the binary:\n%s", shell, script)
			}
			if _, err := exec.LookPath(shell); err != nil {
				if shell == "bash" {
					t.Fatal("bash not found")
				}
				t.Skipf("zsh is not installed: zsh -n not run on the zsh script")
			}
			p := filepath.Join(t.TempDir(), "completion."+shell)
			if err := os.WriteFile(p, []byte(script), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(shell, "-n", p).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", shell, err, out)
			}
		})
	}
}

func TestCompletionBadShell(t *testing.T) {
	for _, args := range [][]string{{"completion", "fish"}, {"completion"}, {"completion", "bash", "zsh"}} {
		_, err := runApp(t, args...)
		if exitCode(err) != exitUsage {
			t.Errorf("%v: exit %d (%v), want %d", args, exitCode(err), err, exitUsage)
		}
	}
	if _, err := runApp(t, "completion", "fish"); err == nil || !strings.Contains(err.Error(), `unknown shell "fish"`) {
		t.Errorf("completion fish: %v, want the argument named", err)
	}
}

// --generate-bash-completion after the words typed lists what may follow:
// a subcommand's flags (long and short), the subcommands at the top.
func TestGenerateBashCompletion(t *testing.T) {
	lines := func(args ...string) []string {
		out, err := runApp(t, append(args, "--generate-bash-completion")...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(out)
	}
	for _, tt := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"measure"}, []string{"--kubeconfig", "--context", "--namespace", "-n", "--request-timeout", "--url", "--trials", "--help"}, []string{"--generate-bash-completion", "help"}},
		{[]string{"measure", "--kubeconfig"}, []string{"--url"}, nil}, // a flag's value pending: the scripts fall back to files
		{[]string{"lint"}, []string{"--cluster", "-A", "--from"}, nil},
		{nil, []string{"measure", "verify", "lint", "completion", "--version"}, []string{"help"}},
		{[]string{"completion"}, []string{"bash", "zsh"}, nil},
	} {
		got := lines(tt.args...)
		for _, w := range tt.want {
			if !slices.Contains(got, w) {
				t.Errorf("%v: %q not offered: %v", tt.args, w, got)
			}
		}
		for _, n := range tt.not {
			if slices.Contains(got, n) {
				t.Errorf("%v: %q offered: %v", tt.args, n, got)
			}
		}
	}
}

// completionEnv returns shell's script and an environment whose PATH finds
// the test binary, acting as epwindow (TestMain), under that name.
func completionEnv(t *testing.T, shell string) (string, []string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "epwindow")); err != nil {
		t.Fatal(err)
	}
	script, err := runApp(t, "completion", shell)
	if err != nil {
		t.Fatal(err)
	}
	return script, append(os.Environ(), runAsBinary+"=1", "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// The bash script completes through the binary: the test binary stands in
// for epwindow on the PATH (TestMain), and _epwindow runs as bash runs it
// on Tab, with COMP_LINE and COMP_POINT.
func TestBashCompletes(t *testing.T) {
	script, env := completionEnv(t, "bash")
	for _, tt := range []struct {
		line string
		want []string
	}{
		{"epwindow mea", []string{"measure"}},
		{"epwindow co", []string{"compare", "completion"}},
		{"epwindow completion ", []string{"bash", "zsh"}},
		{"epwindow measure --kubec", []string{"--kubeconfig"}},
		{"epwindow measure --kubeconfig /tmp/k --request-", []string{"--request-timeout"}},
		{"epwindow lint --cluster -", nil},             // checked below: every flag
		{"epwindow measure --kubeconfig ", []string{}}, // a value: bash's file completion
	} {
		cmd := exec.Command("bash", "-c", script+`
COMP_LINE=$1 COMP_POINT=${#1}
_epwindow
printf '%s\n' "${COMPREPLY[@]}"`, "bash", tt.line)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tt.line, err, out)
		}
		got := strings.Fields(string(out))
		switch {
		case tt.want == nil:
			if !slices.Contains(got, "-A") || !slices.Contains(got, "--context") || slices.Contains(got, "help") {
				t.Errorf("%q: %v, want lint's flags", tt.line, got)
			}
		case !slices.Equal(got, tt.want):
			t.Errorf("%q: %v, want %v", tt.line, got, tt.want)
		}
	}
}

// The zsh script completes through the binary too. compadd and _files only
// work inside zsh's completion widget, so stand-ins (functions come before
// builtins) print what the script offers, after the words typed.
func TestZshCompletes(t *testing.T) {
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Skip("zsh is not installed: the zsh script's completions not run")
	}
	script, env := completionEnv(t, "zsh")
	for _, tt := range []struct {
		words  string // the words typed before the one completed
		prefix string
		want   []string
	}{
		{"epwindow", "", []string{"measure", "completion"}},
		{"epwindow measure", "--", []string{"--kubeconfig", "--url", "-n"}},
		{"epwindow completion", "", []string{"bash", "zsh"}},
		{"epwindow measure --kubeconfig", "", []string{"FILES"}},
	} {
		cmd := exec.Command("zsh", "-f", "-c", `compdef() { :; }
compadd() { print -l -- ${(P)2} }
_files() { print FILES }
`+script+`
words=(${=1} '') CURRENT=$(( ${#${=1}} + 1 )) PREFIX=$2
_epwindow`, "zsh", tt.words, tt.prefix)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tt.words, err, out)
		}
		got := strings.Fields(string(out))
		for _, w := range tt.want {
			if !slices.Contains(got, w) {
				t.Errorf("after %q (prefix %q): %q not offered: %v", tt.words, tt.prefix, w, got)
			}
		}
	}
}
