package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/verify"
)

// twoContexts is a kubeconfig with two contexts: "first" (current, with a
// namespace) and "second" (without one), each with its cluster and user.
const twoContexts = `apiVersion: v1
kind: Config
current-context: first
clusters:
- name: one
  cluster: {server: "https://one.example:6443"}
- name: two
  cluster: {server: "https://two.example:6443"}
users:
- name: alice
  user: {token: alice-token}
- name: bob
  user: {token: bob-token}
contexts:
- name: first
  context: {cluster: one, user: alice, namespace: team-a}
- name: second
  context: {cluster: two, user: bob}
`

// writeKubeconfig writes twoContexts in a temporary folder, points
// KUBECONFIG at it (never at the developer's own) and returns its path.
func writeKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(twoContexts), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", p)
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // no in-cluster fallback
	return p
}

// parseKube runs kube on the client flags of args, as every cluster
// subcommand defines them.
func parseKube(t *testing.T, args ...string) (*kubeClient, error) {
	t.Helper()
	return parseWith(t, &cli.Command{Name: "x", Flags: kubeFlags("namespace")}, kube, args...)
}

// The client flags mean what they mean to kubectl: the kubeconfig's
// current context unless --context; -n, else the context's namespace,
// else "default"; --cluster/--user pick kubeconfig entries; --server,
// --token, --as, --as-group and --insecure-skip-tls-verify override them.
func TestKubeFlagsLikeKubectl(t *testing.T) {
	kubeconfig := writeKubeconfig(t)
	type want struct {
		host, token, context, ns string
		nsGiven                  bool
	}
	for _, tt := range []struct {
		name string
		args []string
		want want
	}{
		{"current context", nil, want{"https://one.example:6443", "alice-token", "first", "team-a", false}},
		{"--context", []string{"--context", "second"}, want{"https://two.example:6443", "bob-token", "second", "default", false}},
		{"-n", []string{"-n", "shop"}, want{"https://one.example:6443", "alice-token", "first", "shop", true}},
		{"--namespace with --context", []string{"--context", "second", "--namespace", "shop"}, want{"https://two.example:6443", "bob-token", "second", "shop", true}},
		{"--kubeconfig", []string{"--kubeconfig", kubeconfig, "--context", "second"}, want{"https://two.example:6443", "bob-token", "second", "default", false}},
		{"--cluster", []string{"--cluster", "two"}, want{"https://two.example:6443", "alice-token", "first", "team-a", false}},
		{"--user", []string{"--user", "bob"}, want{"https://one.example:6443", "bob-token", "first", "team-a", false}},
		{"--server and --token", []string{"--server", "https://other.example:443", "--token", "t0ken"}, want{"https://other.example:443", "t0ken", "first", "team-a", false}},
		{"-s", []string{"-s", "https://other.example:443"}, want{"https://other.example:443", "alice-token", "first", "team-a", false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kc, err := parseKube(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			got := want{kc.config.Host, kc.config.BearerToken, kc.context, kc.namespace, kc.namespaceGiven}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}

	t.Run("impersonation and TLS", func(t *testing.T) {
		kc, err := parseKube(t, "--as", "jane", "--as-group", "ops", "--as-group", "cn=sre,ou=eng", "--insecure-skip-tls-verify")
		if err != nil {
			t.Fatal(err)
		}
		imp := kc.config.Impersonate
		if imp.UserName != "jane" || !slices.Equal(imp.Groups, []string{"ops", "cn=sre,ou=eng"}) {
			t.Errorf("impersonate %+v, want jane in [ops cn=sre,ou=eng] (a comma is part of a group)", imp)
		}
		if !kc.config.Insecure {
			t.Error("--insecure-skip-tls-verify did not reach the client")
		}
	})
}

// --request-timeout takes kubectl's values: 0, whole seconds, or a Go
// duration; anything else is a usage error naming the flag.
func TestKubeRequestTimeout(t *testing.T) {
	writeKubeconfig(t)
	for _, tt := range []struct {
		arg  string
		want time.Duration
	}{
		{"0", 0}, {"1s", time.Second}, {"2m", 2 * time.Minute}, {"5", 5 * time.Second}, {"1h30m", 90 * time.Minute},
	} {
		kc, err := parseKube(t, "--request-timeout", tt.arg)
		if err != nil {
			t.Errorf("--request-timeout %s: %v", tt.arg, err)
			continue
		}
		if kc.config.Timeout != tt.want {
			t.Errorf("--request-timeout %s: timeout %s, want %s", tt.arg, kc.config.Timeout, tt.want)
		}
	}
	if kc, err := parseKube(t); err != nil || kc.config.Timeout != 0 {
		t.Errorf("default: %v, %v; want no timeout", kc, err)
	}
	for _, bad := range []string{"x", "1.5", "-3", "5 s"} {
		_, err := parseKube(t, "--request-timeout", bad)
		if err == nil || !strings.Contains(err.Error(), "--request-timeout") || kubeExitCode(err) != exitUsage {
			t.Errorf("--request-timeout %q: error %v (exit %d), want a usage error naming the flag", bad, err, kubeExitCode(err))
		}
	}
}

// What cannot give a client is named with the flag to change, and exits
// 4 (cluster unusable) or, for a malformed value, 2.
func TestKubeErrors(t *testing.T) {
	dir := t.TempDir()
	writeKubeconfig(t)
	for _, tt := range []struct {
		name string
		env  string // KUBECONFIG, when not twoContexts
		args []string
		code int
		msg  string
	}{
		{"unknown context", "", []string{"--context", "prod-eu"}, exitCluster, `--context "prod-eu" is not in the kubeconfig (contexts: [first second])`},
		{"unknown cluster", "", []string{"--cluster", "three"}, exitCluster, `--cluster "three" is not in the kubeconfig`},
		{"unknown user", "", []string{"--user", "carol"}, exitCluster, `--user "carol" is not in the kubeconfig`},
		{"missing --kubeconfig", "", []string{"--kubeconfig", filepath.Join(dir, "nope")}, exitCluster, "--kubeconfig"},
		{"no kubeconfig at all", filepath.Join(dir, "none"), nil, exitCluster, "no kubeconfig found"},
		{"--as-group without --as", "", []string{"--as-group", "ops"}, exitUsage, "--as-group needs --as"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("KUBECONFIG", tt.env)
			}
			_, err := parseKube(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.msg) || kubeExitCode(err) != tt.code {
				t.Errorf("error %v (exit %d), want exit %d naming %q", err, kubeExitCode(err), tt.code, tt.msg)
			}
		})
	}
	t.Run("--server without a kubeconfig", func(t *testing.T) {
		t.Setenv("KUBECONFIG", filepath.Join(dir, "none"))
		kc, err := parseKube(t, "--server", "https://api.example:6443", "--token", "t")
		if err != nil {
			t.Fatal(err)
		}
		if kc.config.Host != "https://api.example:6443" || kc.namespace != "default" {
			t.Errorf("host %s, namespace %s", kc.config.Host, kc.namespace)
		}
	})
}

// Each subcommand that talks to a cluster takes the client flags, resolves
// its namespace as documented, and exits 2 on a malformed client flag
// before it contacts anything.
func TestSubcommandsTakeClientFlags(t *testing.T) {
	writeKubeconfig(t)
	app := newApp("epwindow")
	for _, name := range []string{"measure", "verify", "lint"} {
		cmd := app.Command(name)
		var have []string
		for _, f := range cmd.Flags {
			have = append(have, f.Names()...)
		}
		for _, f := range kubeFlags("") {
			for _, n := range f.Names() {
				// lint's --cluster is its own switch (live objects).
				if !slices.Contains(have, n) && (name != "lint" || n != flagKubeCluster) {
					t.Errorf("%s lacks kubectl's --%s", name, n)
				}
			}
		}
	}

	bad := []string{"--request-timeout", "soon"}
	for _, args := range [][]string{
		append([]string{"measure", "--url", "http://127.0.0.1:1"}, bad...),
		append([]string{"verify", "--url", "http://127.0.0.1:1", "app"}, bad...),
		append([]string{"lint", "--cluster", "--prestop", "1s"}, bad...),
	} {
		_, err := runApp(t, args...)
		if got := exitCode(err); got != exitUsage || !strings.Contains(err.Error(), "--request-timeout") {
			t.Errorf("%v: exit %d (%v), want %d naming --request-timeout", args, got, err, exitUsage)
		}
	}
	if _, err := runApp(t, "lint", "--cluster", "--prestop", "1s", "--context", "prod-eu"); exitCode(err) != exitCluster {
		t.Errorf("lint --context prod-eu: exit %d (%v), want %d", exitCode(err), err, exitCluster)
	}
	if _, err := runApp(t, "lint", "-A", "--prestop", "1s", "x.yaml"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--all-namespaces needs --cluster") {
		t.Errorf("lint -A without --cluster: %v, want exit 2", err)
	}

	// measure makes its own namespace unless -n: the context's is not taken.
	cfg, err := parseMeasure(t, "--url", "http://127.0.0.1:1")
	if err != nil || cfg.Namespace != "" {
		t.Errorf("measure without -n: namespace %q (%v), want none (its own)", cfg.Namespace, err)
	}
	// verify's Deployment is in -n, else the context's namespace.
	for _, tt := range []struct {
		args []string
		ns   string
	}{
		{nil, "team-a"}, {[]string{"--context", "second"}, "default"}, {[]string{"-n", "shop"}, "shop"},
	} {
		cfg, err := parseVerify(t, append(tt.args, "--url", "http://127.0.0.1:1", "app")...)
		if err != nil || cfg.Namespace != tt.ns {
			t.Errorf("verify %v: namespace %q (%v), want %q", tt.args, cfg.Namespace, err, tt.ns)
		}
	}
	var ke *kubeError
	if _, err := parseVerify(t, "--context", "prod-eu", "--url", "http://127.0.0.1:1", "app"); !errors.As(err, &ke) || ke.code != exitCluster {
		t.Errorf("verify --context prod-eu: %v, want a kubeconfig error (exit %d)", err, exitCluster)
	}
}

// The results header records the flags given, but never the bearer token.
func TestGivenFlagsLeaveOutToken(t *testing.T) {
	writeKubeconfig(t)
	cfg, err := parseMeasure(t, "--url", "http://127.0.0.1:1", "--token", "s3cret", "--context", "second")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Flags[flagToken]; ok {
		t.Errorf("--token recorded in the header: %v", cfg.Flags)
	}
	if cfg.Flags[flagContext] != "second" {
		t.Errorf("--context not recorded: %v", cfg.Flags)
	}
}

func parseVerify(t *testing.T, args ...string) (verify.Config, error) {
	t.Helper()
	return parseWith(t, verifyCommand(), verifyConfig, args...)
}

// lint's --cluster is its own switch (check the live objects), not
// kubectl's kubeconfig cluster: its "true" must not be looked up.
func TestLintClusterSwitchIsNoKubeconfigCluster(t *testing.T) {
	writeKubeconfig(t)
	kc, err := parseWith(t, lintCommand(), kube, "--cluster", "-n", "shop")
	if err != nil {
		t.Fatalf("lint --cluster: %v", err)
	}
	if kc.config.Host != "https://one.example:6443" || kc.namespace != "shop" {
		t.Errorf("lint --cluster: host %s namespace %s, want the current context's cluster and -n", kc.config.Host, kc.namespace)
	}
}
