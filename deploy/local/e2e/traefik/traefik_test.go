// Package traefik tests the local cluster's Traefik (`up --ingress all`):
// the Gateway API CRDs, Traefik's GatewayClass and Gateway accepted by
// Traefik itself, the IngressClasses, a probe workload served through each
// of Traefik's three providers (Ingress class traefik, ingress-nginx class
// nginx, and an HTTPRoute on the Gateway) next to Skipper, and a teardown
// that leaves no Traefik process.
package traefik

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/epwindow/epwindow/deploy/local/e2e/testenv"
	"github.com/epwindow/epwindow/internal/localcluster"
)

var (
	gatewayClassGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
	gatewayGVR      = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	httpRouteGVR    = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
)

func TestTraefikProviders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := localcluster.Start(ctx, localcluster.Options{Nodes: 2, Dir: dir, Ingress: "all", ProxyMode: "none", TraefikThrottle: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if c.IngressURL == "" || c.TraefikURL == "" || c.TraefikAPIURL == "" || c.Gateway != "traefik/traefik" {
		t.Fatalf("READY line: skipper %q, traefik %q, api %q, gateway %q", c.IngressURL, c.TraefikURL, c.TraefikAPIURL, c.Gateway)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// Traefik's own controller accepted its class and programmed its
	// Gateway (up waits for the Gateway; the class is Traefik's answer too).
	gc, err := dyn.Resource(gatewayClassGVR).Get(ctx, "traefik", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ctrl, _, _ := unstructured.NestedString(gc.Object, "spec", "controllerName"); ctrl != "traefik.io/gateway-controller" || !condition(gc, "Accepted") {
		t.Errorf("GatewayClass traefik: controller %q, status %v", ctrl, gc.Object["status"])
	}
	gw, err := dyn.Resource(gatewayGVR).Namespace("traefik").Get(ctx, "traefik", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !condition(gw, "Accepted") || !condition(gw, "Programmed") {
		t.Errorf("Gateway traefik/traefik status %v", gw.Object["status"])
	}
	// The classes: skipper stays the default beside Traefik's two.
	classes := map[string]string{"skipper": "zalando.org/skipper", "traefik": "traefik.io/ingress-controller", "nginx": "k8s.io/ingress-nginx"}
	for name, ctrl := range classes {
		ic, err := c.Client.NetworkingV1().IngressClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("IngressClass %s: %v", name, err)
			continue
		}
		def := ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true"
		if ic.Spec.Controller != ctrl || def != (name == "skipper") {
			t.Errorf("IngressClass %s: controller %q default %v", name, ic.Spec.Controller, def)
		}
	}

	// One probe workload behind all three of Traefik's providers, each on
	// its own host, and behind Skipper.
	ns, err := testenv.CreateNamespace(ctx, c.Client, "traefik")
	if err != nil {
		t.Fatal(err)
	}
	const name = "web"
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, testenv.ProbeDeployment(name, 2, 5, time.Second), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, testenv.Service(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hosts := map[string]string{"traefik": "ingress.test", "nginx": "nginx.test", "skipper": "skipper.test"}
	for class, host := range hosts {
		ing := testenv.Ingress(name + "-" + class)
		ing.Spec.IngressClassName = &class
		ing.Spec.Rules[0].Host = host
		ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = name
		if _, err := c.Client.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1",
		"kind":       "HTTPRoute",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": "traefik", "namespace": "traefik"}},
			"hostnames":  []any{"route.test"},
			"rules": []any{map[string]any{
				"backendRefs": []any{map[string]any{"name": name, "port": int64(80)}},
			}},
		},
	}}
	if _, err := dyn.Resource(httpRouteGVR).Namespace(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ via, url, host string }{
		{"Traefik's Ingress provider", c.TraefikURL, hosts["traefik"]},
		{"Traefik's ingress-nginx provider", c.TraefikURL, hosts["nginx"]},
		{"Traefik's Gateway provider", c.TraefikURL, "route.test"},
		{"Skipper", c.IngressURL, hosts["skipper"]},
	} {
		if err := testenv.Poll(ctx, tt.via, 200*time.Millisecond, time.Minute, func() (bool, error) {
			return answers(ctx, tt.url, tt.host), nil
		}); err != nil {
			t.Errorf("%s never served host %s: %v", tt.via, tt.host, err)
		}
	}
	// Each class stays with its controller: Skipper does not serve
	// Traefik's host, nor Traefik Skipper's.
	if answers(ctx, c.IngressURL, hosts["traefik"]) || answers(ctx, c.TraefikURL, hosts["skipper"]) {
		t.Error("an Ingress is served by a controller of another class")
	}
	// The route's status is Traefik's: Accepted and ResolvedRefs.
	got, err := dyn.Resource(httpRouteGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parents, _, _ := unstructured.NestedSlice(got.Object, "status", "parents")
	if len(parents) != 1 || !parentCondition(parents[0], "Accepted") || !parentCondition(parents[0], "ResolvedRefs") {
		t.Errorf("HTTPRoute status parents %v", parents)
	}

	if err := c.Shutdown(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// Traefik's command line names its token file under dir.
	left, err := testenv.Leftovers(ctx, dir, dir+"/pki/traefik.token")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("teardown left behind:\n  %s", strings.Join(left, "\n  "))
	}
}

// answers tells whether a GET of / with Host host through base reaches a
// probe (its "pod" answer names the pod).
func answers(ctx context.Context, base, host string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	if err != nil {
		return false
	}
	req.Host = host
	resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(b), "web-")
}

func condition(o *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	return conditionIn(conds, typ)
}

func parentCondition(parent any, typ string) bool {
	m, _ := parent.(map[string]any)
	conds, _, _ := unstructured.NestedSlice(m, "conditions")
	return conditionIn(conds, typ)
}

func conditionIn(conds []any, typ string) bool {
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			return m["status"] == "True"
		}
	}
	return false
}
