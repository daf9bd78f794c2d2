package measure

import (
	"testing"

	"github.com/epwindow/epwindow/deploy"
)

// A run in an existing namespace does not apply the manifests' Namespace,
// so it names the labels that Namespace would carry: Pod Security, and an
// overlay's (the ALB controller's readiness-gate injection), not
// epwindow's own bookkeeping.
func TestNamespaceLabels(t *testing.T) {
	wl, err := deploy.Render(deploy.Params{Namespace: "team-a", Name: "epwindow-abc123", Replicas: 2,
		Image: deploy.DefaultImage, IngressClass: "alb", Hold: 60e9, RunID: "abc123"})
	if err != nil {
		t.Fatal(err)
	}
	got := namespaceLabels(wl.Namespace)
	want := "elbv2.k8s.aws/pod-readiness-gate-inject=enabled, pod-security.kubernetes.io/enforce=restricted, pod-security.kubernetes.io/enforce-version=latest"
	if got != want {
		t.Errorf("namespaceLabels = %q, want %q", got, want)
	}
}
