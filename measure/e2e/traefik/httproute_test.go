package traefik

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// shutdownStages are the stages every valid trial carries.
var shutdownStages = []string{results.StageDeleteAcked, results.StagePodTerminatingSeen,
	results.StageServerDeleteTime, results.StageSliceNotReady, results.StageSliceNotServing, results.StageSliceRemoved,
	results.StageUpstreamLastSeen, results.StageUpstreamRemoved, results.StagePrestopCalled, results.StageSigterm,
	results.StageLastAccept, results.StageLastRequest, results.StageClientLastRouted, results.StageContainerExit,
	results.StagePodDeleted}

// measure --route httproute through Traefik's Gateway provider, with the
// observer left to auto: it must pick traefik by the GatewayClass's
// controller. Every trial is valid with every stage. The Gateway provider
// builds servers from ready endpoints only (pkg/provider/kubernetes/
// gateway/kubernetes.go), so the deleted pod's server goes with the
// slice_not_ready update: upstream_removed follows it within one throttle
// and one poll (the bound of CheckGroundTruth), long before slice_removed.
// The header names the route, its Gateway and the controller.
func TestHTTPRoute(t *testing.T) {
	cfg := Config(t, cluster, "", 3)
	cfg.Route = measure.RouteHTTPRoute
	cfg.Gateway = measure.GatewayRef{Namespace: "traefik", Name: "traefik"}
	cfg.Observer = upstream.KindAuto
	sink := Run(t, cfg)
	for _, r := range sink.Records {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			continue
		}
		for _, st := range shutdownStages {
			if _, ok := r.Offset(st); !ok {
				t.Errorf("trial %d: no %s", r.Trial, st)
			}
		}
		nr, _ := r.Offset(results.StageSliceNotReady)
		rm, _ := r.Offset(results.StageUpstreamRemoved)
		gone, _ := r.Offset(results.StageSliceRemoved)
		if rm < nr-slack || rm-nr > Bound(throttle) || rm >= gone {
			t.Errorf("trial %d: slice_not_ready %s, upstream_removed %s, slice_removed %s: want the server gone within %s of slice_not_ready",
				r.Trial, nr, rm, gone, Bound(throttle))
		}
		t.Logf("trial %d: upstream_removed − slice_not_ready %s, window %v", r.Trial, rm-nr, func() time.Duration { w, _ := r.Window(); return w }())
	}
	h := sink.Meta
	if h == nil || h.Route.Kind != results.RouteKindHTTPRoute || h.Route.Gateway != "traefik/traefik" ||
		h.Route.GatewayClass != "traefik" || h.Route.Controller != upstream.ControllerTraefikGateway {
		t.Errorf("header route %+v", h.Route)
	}
	if len(h.Observers) != 1 || h.Observers[0].Name != upstream.KindTraefik {
		t.Errorf("header observers %+v, want auto to have picked traefik", h.Observers)
	}
}

// Bad Gateway input, through the CLI, in an existing namespace (so that
// what the run left would stay visible): a Gateway that does not exist
// exits 2 naming --gateway; a Gateway whose class no controller runs
// (nothing ever accepts it) exits 4 naming the Gateway, its class and the
// controller that never answered — both before anything is created. A
// Gateway Traefik accepts but whose listener admits routes from its own
// namespace only: the run creates its HTTPRoute, Traefik refuses it
// (Accepted=False, NotAllowedByListeners: loadHTTPRoutes in
// pkg/provider/kubernetes/gateway/httproute.go), and the run stops at once
// with Traefik's reason, exit 1, after removing what it made.
func TestBadGateway(t *testing.T) {
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "epwindow-traefik-bad"
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	// A class whose controller does not run here, and its Gateway.
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": "nobody"},
		"spec":     map[string]any{"controllerName": "example.com/nobody"},
	}}
	if _, err := dyn.Resource(deploy.GatewayResource.GroupVersion().WithResource("gatewayclasses")).Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": "orphan", "namespace": ns},
		"spec": map[string]any{"gatewayClassName": "nobody", "listeners": []any{map[string]any{
			"name": "web", "port": int64(80), "protocol": "HTTP"}}},
	}}
	if _, err := dyn.Resource(deploy.GatewayResource).Namespace(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Traefik's Gateway provider maps a listener to the entry point of the
	// same port: the web entry point's.
	_, port, _ := strings.Cut(strings.TrimPrefix(cluster.TraefikURL, "http://"), ":")
	webPort, _ := strconv.Atoi(port)
	same := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": "same-namespace", "namespace": "traefik"},
		"spec": map[string]any{"gatewayClassName": "traefik", "listeners": []any{map[string]any{
			"name": "web", "port": int64(webPort), "protocol": "HTTP", "hostname": "same.test",
			"allowedRoutes": map[string]any{"namespaces": map[string]any{"from": "Same"}}}}},
	}}
	if _, err := dyn.Resource(deploy.GatewayResource).Namespace("traefik").Create(ctx, same, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer dyn.Resource(deploy.GatewayResource).Namespace("traefik").Delete(ctx, "same-namespace", metav1.DeleteOptions{})
	// The preflight wants the Gateway accepted: wait for Traefik's answer.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got, err := dyn.Resource(deploy.GatewayResource).Namespace("traefik").Get(ctx, "same-namespace", metav1.GetOptions{})
		if err == nil && accepted(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Traefik never accepted Gateway traefik/same-namespace: %v %v", err, got)
		}
	}
	bin := e2etest.Bin(t)
	for _, tt := range []struct {
		gateway string
		code    int
		want    []string
	}{
		{"traefik/missing", 2, []string{"--gateway", "traefik/missing", "not found"}},
		{ns + "/orphan", 4, []string{ns + "/orphan", "nobody", "example.com/nobody"}},
		{"traefik/same-namespace", 1, []string{"traefik/same-namespace", "NotAllowedByListeners"}},
	} {
		t.Run(tt.gateway, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "results.jsonl")
			cmd := exec.Command(bin, "measure", "--kubeconfig", cluster.Kubeconfig, "--url", cluster.TraefikURL,
				"--route", "httproute", "--gateway", tt.gateway, "--observer", "traefik", "--observer-url", cluster.TraefikAPIURL,
				"--trials", "1", "--host", "same.test", "--settle-timeout", "90s", "-n", ns, "--out", out)
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			began := time.Now()
			b, err := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...).CombinedOutput()
			t.Logf("exit %d:\n%s", e2etest.ExitCode(err), b)
			if code := e2etest.ExitCode(err); code != tt.code {
				t.Errorf("exit %d, want %d; output:\n%s", code, tt.code, b)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("output does not name %q:\n%s", w, b)
				}
			}
			// Known before anything is created: no wait for a settle timeout.
			if d := time.Since(began); d > 30*time.Second {
				t.Errorf("took %s to fail", d)
			}
			if left := append(e2etest.RunLeftovers(t, cluster.Client, ns), e2etest.RouteLeftovers(t, dyn, ns)...); len(left) != 0 {
				t.Errorf("left in %s: %v", ns, left)
			}
		})
	}
}

// accepted tells whether an object's status.conditions hold Accepted=True.
func accepted(o *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Accepted" {
			return m["status"] == "True"
		}
	}
	return false
}
