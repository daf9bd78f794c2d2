package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
)

func adminClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// epwindowNamespaces lists the namespaces epwindow created and that still
// exist (terminating ones included).
func epwindowNamespaces(t *testing.T) []string {
	t.Helper()
	list, err := adminClient(t).CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{
		LabelSelector: deploy.LabelManagedBy + "=" + deploy.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ns := range list.Items {
		out = append(out, ns.Name)
	}
	return out
}

// measureArgs are the flags that make a quick, valid run on the local cluster.
func measureArgs(kubeconfig string, extra ...string) []string {
	return append([]string{"measure", "--kubeconfig", kubeconfig, "--url", cluster.IngressURL, "--ingress-class", "skipper",
		"--observer", "skipper", "--observer-url", cluster.RoutesURL, "--observer-interval", "200ms",
		"--quiet-period", "1s", "--rate", "100"}, extra...)
}

func exitCode(err error) int { return e2etest.ExitCode(err) }

// Bad input stops measure with a message naming the fix, a documented exit
// code (README "Exit codes"), and nothing created.
func TestCLIBadInput(t *testing.T) {
	bin := e2etest.Bin(t)
	dir := t.TempDir()
	garbled := filepath.Join(dir, "garbled")
	if err := os.WriteFile(garbled, []byte("apiVersion: v1\nclusters: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The admin kubeconfig pointed at a port nothing listens on.
	cfg, err := clientcmd.LoadFromFile(cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://127.0.0.1:1"
	}
	unreachable := filepath.Join(dir, "unreachable")
	if err := clientcmd.WriteToFile(*cfg, unreachable); err != nil {
		t.Fatal(err)
	}
	before := epwindowNamespaces(t)
	admin := cluster.Kubeconfig
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"zero trials", measureArgs(admin, "--trials", "0"), 2, "--trials (0) must be at least 1"},
		{"hold no longer than the quiet period", measureArgs(admin, "--hold", "1s"), 2, "--hold (1s) must exceed --quiet-period (1s)"},
		{"negative duration", measureArgs(admin, "--drain", "-5s"), 2, "--drain (-5s) must not be negative"},
		{"one replica", measureArgs(admin, "--replicas", "1"), 2, "--replicas (1) must be at least 2"},
		{"missing kubeconfig", measureArgs(filepath.Join(dir, "nope")), 4, "--kubeconfig"},
		{"garbled kubeconfig", measureArgs(garbled), 4, "read kubeconfig"},
		{"unknown context", measureArgs(admin, "--context", "prod-eu"), 4, `--context "prod-eu" is not in the kubeconfig`},
		{"unreachable server", measureArgs(unreachable), 4, "cannot reach the API server https://127.0.0.1:1"},
		{"forbidden", measureArgs(cluster.RestrictedKubeconfig), 5, "create namespaces"},
		// In an existing namespace the missing rules are the Role's, named
		// in that namespace.
		{"forbidden in --namespace", measureArgs(cluster.RestrictedKubeconfig, "--namespace", "default"), 5,
			"create deployments.apps -n default"},
		{"forbidden in --namespace names the manifest", measureArgs(cluster.RestrictedKubeconfig, "--namespace", "default"), 5,
			"grant them with deploy/rbac/namespaced"},
		{"--namespace that does not exist", measureArgs(admin, "--namespace", "no-such-team"), 2, "--namespace no-such-team: no such namespace"},
		{"--namespace not a name", measureArgs(admin, "--namespace", "Team_A"), 2, `--namespace "Team_A": not a namespace name`},
		{"unknown ingress class", measureArgs(admin, "--ingress-class", "nginx-typo"), 2, `--ingress-class "nginx-typo": no such IngressClass`},
		{"url not answering", append(measureArgs(admin), "--url", "http://127.0.0.1:1"), 2, "--url http://127.0.0.1:1 does not answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, append(tt.args, "--out", filepath.Join(t.TempDir(), "r.jsonl"))...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if got := exitCode(err); got != tt.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", got, tt.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("stderr does not name the fix %q:\n%s", tt.msg, stderr.String())
			}
		})
	}
	if after := epwindowNamespaces(t); len(after) != len(before) {
		t.Errorf("bad input created namespaces: before %v, after %v", before, after)
	}
}
