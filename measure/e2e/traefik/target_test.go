package traefik

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/results"
)

// measure --target on a team's Deployment routed by an HTTPRoute on
// Traefik's Gateway: the run finds the route by its backendRef and the
// Gateway as its parent (no --gateway), the observer by the GatewayClass's
// controller, and the route's hostname for the load. The app sleeps 3 s in
// its preStop, so every window falls inside it (Traefik drops a server
// within a throttle and a poll of slice_not_ready, TestHTTPRoute) and no
// request fails. Two trials: the point is the route's discovery on the
// real Gateway, not a distribution; with the sidecar's rollouts in and
// out, about a minute.
func TestTargetThroughHTTPRoute(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	team := e2etest.TeamApp{Namespace: "team-gw", Name: "app", Replicas: 2, PreStopSleep: 3}
	if err := team.Create(ctx, cluster.Client); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": "app", "namespace": team.Namespace},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": "traefik", "namespace": "traefik"}},
			"hostnames":  []any{"app.gw.example.test"},
			"rules":      []any{map[string]any{"backendRefs": []any{map[string]any{"name": team.Name, "port": int64(80)}}}},
		},
	}}
	if _, err := dyn.Resource(deploy.HTTPRouteResource).Namespace(team.Namespace).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "run.jsonl")
	cmd := exec.CommandContext(ctx, e2etest.Bin(t), "measure", "--kubeconfig", cluster.Kubeconfig, "--target", "deployment/"+team.Name,
		"--namespace", team.Namespace, "--route", "httproute", "--url", cluster.TraefikURL, "--observer-url", cluster.TraefikAPIURL,
		"--observer-interval", Interval.String(), "--rate", "50", "--trials", "2", "--trial-jitter", "1s", "--settle-timeout", "2m", "--out", out)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	code := e2etest.ExitCode(cmd.Run())
	t.Logf("exit %d:\n%s", code, buf.String())
	if code != 0 {
		t.Errorf("measure --target through the HTTPRoute exited %d, want 0", code)
	}
	f := e2etest.ReadResults(t, out)
	if h := f.Header; h == nil || h.Route.Kind != results.RouteKindHTTPRoute || h.Route.Gateway != "traefik/traefik" ||
		h.Target == nil || h.Target.Route != "HTTPRoute/app" {
		t.Fatalf("header %+v: want the HTTPRoute app on Gateway traefik/traefik", f.Header)
	}
	for _, r := range f.Trials {
		w, ok := r.Window()
		t.Logf("trial %d: window %v, failures %v, reasons %s", r.Trial, w, r.ClientFailures, r.InvalidReason())
		if !r.Valid || !ok || w >= 3*time.Second || len(r.ClientFailures) > 0 {
			t.Errorf("trial %d: valid %v, window %v, failures %v: want a valid window inside the 3 s preStop and no failure", r.Trial, r.Valid, w, r.ClientFailures)
		}
		if _, ok := r.Offset(results.StageUpstreamRemoved); !ok {
			t.Errorf("trial %d: no upstream_removed: the observer did not follow Traefik", r.Trial)
		}
	}
	d, err := cluster.Client.AppsV1().Deployments(team.Namespace).Get(ctx, team.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, run := deploy.TemplateSidecar(d.Spec.Template); c != nil || run != "" {
		t.Errorf("the sidecar is still in the template after the run")
	}
}
