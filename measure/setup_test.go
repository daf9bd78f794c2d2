package measure

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

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

// The trials' DELETE goes out without client-side rate limiting, whatever
// the caller's client allows: T0 is stamped just before it.
func TestDeleterIsNotRateLimited(t *testing.T) {
	cfg := Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1", QPS: 5, Burst: 10}}
	c, err := newDeleter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, ok := c.(*kubernetes.Clientset)
	if !ok {
		t.Fatalf("deleter %T, want a clientset built from RESTConfig", c)
	}
	if rl := cs.CoreV1().RESTClient().GetRateLimiter(); rl != nil {
		t.Errorf("the DELETE client has a rate limiter (%T)", rl)
	}
	if cfg.RESTConfig.QPS != 5 {
		t.Errorf("the caller's RESTConfig was changed: QPS %v", cfg.RESTConfig.QPS)
	}
	// Without a RESTConfig (fake clients), the caller's client is used.
	fc := fake.NewClientset()
	if c, _ := newDeleter(Config{Client: fc}); c != fc {
		t.Errorf("deleter without RESTConfig = %T, want the caller's client", c)
	}
}
