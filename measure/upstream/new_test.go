package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
)

func ingressClass(name, controller string, isDefault bool) *networkingv1.IngressClass {
	ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: controller}}
	if isDefault {
		ic.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}
	}
	return ic
}

func ingress(ns, name, class string) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if class != "" {
		ing.Spec.IngressClassName = &class
	}
	return ing
}

// restCfg points at a loopback port nothing listens on: observers can be
// built, and a port-forward fails at once.
var restCfg = &rest.Config{Host: "http://127.0.0.1:1"}

func TestNewAutoPicksByController(t *testing.T) {
	for _, tc := range []struct {
		controller string
		kind       string
		reason     string
	}{
		{"k8s.io/ingress-nginx", KindNginx, "IngressClass c: controller k8s.io/ingress-nginx"},
		{"traefik.io/ingress-controller", KindTraefik, "controller traefik.io/ingress-controller"},
		{"projectcontour.io/contour", KindEnvoy, "projectcontour.io/contour"},
		{"gateway.envoyproxy.io/gatewayclass-controller", KindEnvoy, "gateway.envoyproxy.io"},
		{"zalando.org/skipper", KindSkipper, "zalando.org/skipper"},
		{"example.com/skipper-ingress", KindSkipper, "skipper-ingress"},
		{"elbv2.k8s.aws/alb", KindNone, "--observer cmd --upstreams-cmd"},
	} {
		t.Run(tc.controller, func(t *testing.T) {
			cs := fake.NewClientset(ingressClass("c", tc.controller, false), ingress("epwindow", "probe", "c"))
			obs, choice, err := New(context.Background(), KindAuto, Deps{Client: cs, Config: restCfg}, probeTarget, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer obs.Close()
			if choice.Kind != tc.kind || obs.Name() != tc.kind || choice.Controller != tc.controller || !strings.Contains(choice.String(), tc.reason) {
				t.Errorf("choice %+v (%s), observer %s; want %s because %q", choice, choice, obs.Name(), tc.kind, tc.reason)
			}
		})
	}
}

// TestNewAutoPicksByGatewayController: with a route's GatewayClass, auto
// picks by its controllerName and reads no IngressClass (the fake client
// holds none); envoy's pod defaults follow the controller.
func TestNewAutoPicksByGatewayController(t *testing.T) {
	for _, tc := range []struct {
		controller string
		urls       []string
		kind       string
		reason     string
		selector   string
		port       int
	}{
		{ControllerTraefikGateway, nil, KindTraefik, "GatewayClass gc: controller traefik.io/gateway-controller", "app.kubernetes.io/name=traefik", 8080},
		{"gateway.envoyproxy.io/gatewayclass-controller", nil, KindEnvoy, "GatewayClass gc: controller gateway.envoyproxy.io/gatewayclass-controller",
			"app.kubernetes.io/component=proxy,app.kubernetes.io/managed-by=envoy-gateway", 19000},
		{ControllerIstioGateway, nil, KindEnvoy, "GatewayClass gc: controller istio.io/gateway-controller",
			"gateway.istio.io/managed=istio.io-gateway-controller,gateway.networking.k8s.io/gateway-class-name=gc", 15000},
		{ControllerCiliumGateway, nil, KindNone, "unix socket, which a port-forward cannot reach", "", 0},
		{ControllerCiliumGateway, []string{"http://127.0.0.1:9901"}, KindEnvoy, "GatewayClass gc: controller io.cilium/gateway-controller (cilium-envoy's admin at --observer-url", "", 0},
		{"example.net/gateway-controller", nil, KindNone, "GatewayClass gc: controller example.net/gateway-controller has no observer here; upstream stages need --observer cmd --upstreams-cmd", "", 0},
	} {
		t.Run(fmt.Sprintf("%s, %d URLs", tc.controller, len(tc.urls)), func(t *testing.T) {
			obs, choice, err := New(context.Background(), KindAuto, Deps{Client: fake.NewClientset(), Config: restCfg}, routeTarget,
				Options{GatewayClass: "gc", GatewayController: tc.controller, URLs: tc.urls})
			if err != nil {
				t.Fatal(err)
			}
			defer obs.Close()
			if choice.Kind != tc.kind || obs.Name() != tc.kind || choice.Controller != tc.controller || !strings.Contains(choice.Reason, tc.reason) {
				t.Errorf("choice %+v, observer %s; want %s because %q", choice, obs.Name(), tc.kind, tc.reason)
			}
			if tc.selector == "" {
				return
			}
			src := obs.(*httpObserver).src.(*podSource)
			if src.selector != tc.selector || src.port != tc.port {
				t.Errorf("pods %q port %d; want %q port %d", src.selector, src.port, tc.selector, tc.port)
			}
		})
	}

	// --upstreams-cmd still wins, and an explicit envoy takes the Gateway
	// controller's pod defaults.
	_, choice, err := New(context.Background(), KindAuto, Deps{Client: fake.NewClientset(), Config: restCfg}, routeTarget,
		Options{GatewayClass: "gc", GatewayController: ControllerTraefikGateway, Command: "true"})
	if err != nil || choice.Kind != KindCmd {
		t.Errorf("with --upstreams-cmd: %s, %v; want cmd", choice, err)
	}
	obs, choice, err := New(context.Background(), KindEnvoy, Deps{Client: fake.NewClientset(), Config: restCfg}, routeTarget,
		Options{GatewayClass: "gc", GatewayController: ControllerIstioGateway})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	if src := obs.(*httpObserver).src.(*podSource); choice.Kind != KindEnvoy || choice.Controller != ControllerIstioGateway || src.port != 15000 || src.container != "istio-proxy" {
		t.Errorf("--observer envoy on Istio: %+v, pods %q port %d container %q", choice, src.selector, src.port, src.container)
	}
}

// TestTraefikVersionByURL: with --observer-url there is no pod image, so the
// Traefik observer asks the API's /api/version at the URL's origin, once;
// an API that does not answer leaves the version empty.
func TestTraefikVersionByURL(t *testing.T) {
	body := fixture(t, "traefik_version.json")
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		if r.URL.Path != "/traefik/api/version" {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	ctx := context.Background()
	obs, _, err := New(ctx, KindTraefik, Deps{}, routeTarget, Options{URLs: []string{srv.URL + "/traefik/api/http/services?per_page=100000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	for range 2 {
		if got := obs.(Versioner).Version(ctx); got != "3.6.12" {
			t.Errorf("version %q, want 3.6.12 from /api/version", got)
		}
	}
	mu.Lock()
	if len(asked) != 1 || asked[0] != "/traefik/api/version" {
		t.Errorf("requests %q, want one GET /traefik/api/version", asked)
	}
	mu.Unlock()

	for name, u := range map[string]string{"404": srv.URL, "nothing listening": "http://127.0.0.1:1"} {
		obs, _, err := New(ctx, KindTraefik, Deps{}, routeTarget, Options{URLs: []string{u}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer obs.Close()
		if got := obs.(Versioner).Version(ctx); got != "" {
			t.Errorf("%s: version %q, want none", name, got)
		}
	}
}

func TestVersionURL(t *testing.T) {
	for base, want := range map[string]string{
		"http://127.0.0.1:8080":                                  "http://127.0.0.1:8080/api/version",
		"http://127.0.0.1:8080/":                                 "http://127.0.0.1:8080/api/version",
		"http://traefik.local/api/http/services?per_page=100000": "http://traefik.local/api/version",
		"https://h.example/traefik/api/http/services":            "https://h.example/traefik/api/version",
		"not a url": "",
	} {
		if got := versionURL(base, "/api/version"); got != want {
			t.Errorf("versionURL(%q) = %q, want %q", base, got, want)
		}
	}
}

func TestNewAutoFindsTheClass(t *testing.T) {
	nginx, traefik := ingressClass("nginx", ControllerNginx, false), ingressClass("traefik", ControllerTraefik, true)
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		opts    Options
		want    string
		wantErr string
	}{
		{"the Ingress's class", []runtime.Object{nginx, traefik, ingress("epwindow", "probe", "nginx")}, Options{}, KindNginx, ""},
		{"--ingress-class wins", []runtime.Object{nginx, traefik, ingress("epwindow", "probe", "nginx")}, Options{IngressClass: "traefik"}, KindTraefik, ""},
		{"the default class", []runtime.Object{nginx, traefik}, Options{}, KindTraefik, ""},
		{"no default among several", []runtime.Object{nginx, ingressClass("t2", ControllerTraefik, false)}, Options{}, "", "--ingress-class"},
		{"class missing", []runtime.Object{ingress("epwindow", "probe", "gone")}, Options{}, "", "get ingressclass gone"},
		{"--upstreams-cmd wins over the class", []runtime.Object{nginx, traefik}, Options{Command: "true"}, KindCmd, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.objs...)
			obs, choice, err := New(context.Background(), KindAuto, Deps{Client: cs, Config: restCfg}, probeTarget, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer obs.Close()
			if choice.Kind != tc.want {
				t.Errorf("picked %s, want %s", choice, tc.want)
			}
		})
	}
}

func TestNewErrorsNameTheFlag(t *testing.T) {
	cs := fake.NewClientset()
	for _, tc := range []struct {
		name, kind string
		opts       Options
		want       []string
	}{
		{"cmd without a command", KindCmd, Options{}, []string{"--upstreams-cmd"}},
		{"unknown kind", "haproxy-ingress", Options{}, []string{"--observer", "skipper, nginx"}},
		{"envoy of an unknown controller", KindEnvoy, Options{}, []string{"--controller-selector", "--envoy-admin-port", "--observer-url"}},
		{"bad cluster pattern", KindEnvoy, Options{URLs: []string{"http://127.0.0.1:1"}, EnvoyCluster: "("}, []string{"--envoy-cluster"}},
		{"bad selector", KindNginx, Options{ControllerSelector: "a in (("}, []string{"--controller-selector"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := New(context.Background(), tc.kind, Deps{Client: cs, Config: restCfg}, probeTarget, tc.opts)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func controllerPod(ns, name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/component": "controller"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "controller", Image: "registry.k8s.io/ingress-nginx/controller:v1.11.2@sha256:d5f8", Args: append([]string{"/nginx-ingress-controller"}, args...)},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestNginxPodDiscovery: the nginx observer finds the controller pods by the
// chart's labels, reports --sync-rate-limit from their args, and when a pod
// cannot be port-forwarded names the pod and the RBAC rule. With no pods it
// names --controller-selector. The port-forward itself runs on the local
// cluster (cluster_test.go).
func TestNginxPodDiscovery(t *testing.T) {
	cs := fake.NewClientset(
		controllerPod("ingress-nginx", "ingress-nginx-controller-a", "--sync-rate-limit=1"),
		controllerPod("ingress-nginx", "ingress-nginx-controller-b", "--sync-rate-limit=1"),
	)
	fc := clocktesting.NewFakeClock(t0)
	obs, _, err := New(context.Background(), KindNginx, Deps{Client: cs, Config: restCfg, Clock: fc}, probeTarget,
		Options{Interval: time.Second, ControllerNamespace: "ingress-nginx"})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	if got := obs.Settings(context.Background()); got["sync-rate-limit"] != "1" {
		t.Errorf("settings %v, want sync-rate-limit 1", got)
	}
	if got := obs.(Versioner).Version(context.Background()); got != "v1.11.2" {
		t.Errorf("version %q, want the image tag v1.11.2", got)
	}
	s, err := obs.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Replicas) != 2 {
		t.Fatalf("replicas %+v", s.Replicas)
	}
	for _, r := range s.Replicas {
		if r.Err == nil {
			t.Fatalf("%s: port-forward to a closed API server port succeeded?", r.Replica)
		}
		t.Logf("unreachable replica: %v", r.Err)
		for _, w := range []string{"pod " + r.Replica, "port 10246", "create pods/portforward in namespace ingress-nginx", "--controller-port"} {
			if !strings.Contains(r.Err.Error(), w) {
				t.Errorf("error %q does not mention %q", r.Err, w)
			}
		}
	}

	empty, _, err := New(context.Background(), KindNginx, Deps{Client: fake.NewClientset(), Config: restCfg, Clock: fc}, probeTarget, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if _, err := empty.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "--controller-selector") {
		t.Errorf("no pods: err %v, want one naming --controller-selector", err)
	}
	if got := empty.Settings(context.Background()); got != nil {
		t.Errorf("no pods: settings %v, want none", got)
	}
}

// An observer with no controller pod to read fails before the run creates
// anything, naming --observer-url and the selector flags; one given URLs,
// or one whose pods run, passes.
func TestPreflightNeedsAController(t *testing.T) {
	ctx := context.Background()
	empty, _, err := New(ctx, KindSkipper, Deps{Client: fake.NewClientset(), Config: restCfg}, probeTarget, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	err = Preflight(ctx, empty)
	if err == nil {
		t.Fatal("Preflight passed with no Skipper pod and no --observer-url")
	}
	for _, w := range []string{"application=skipper-ingress", "--" + FlagObserverURL, "--" + FlagControllerSelector} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	byURL, _, err := New(ctx, KindSkipper, Deps{Client: fake.NewClientset(), Config: restCfg}, probeTarget,
		Options{URLs: []string{"http://127.0.0.1:9911"}})
	if err != nil {
		t.Fatal(err)
	}
	defer byURL.Close()
	if err := Preflight(ctx, byURL); err != nil {
		t.Errorf("Preflight with --observer-url: %v", err)
	}
	running, _, err := New(ctx, KindNginx, Deps{Client: fake.NewClientset(controllerPod("ingress-nginx", "ingress-nginx-controller-a")), Config: restCfg},
		probeTarget, Options{ControllerNamespace: "ingress-nginx"})
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	if err := Preflight(ctx, running); err != nil {
		t.Errorf("Preflight with a running controller pod: %v", err)
	}
	if err := Preflight(ctx, noneObserver{}); err != nil {
		t.Errorf("Preflight of --observer none: %v", err)
	}
}

func TestImageTag(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/ingress-nginx/controller:v1.11.2": "v1.11.2",
		"registry:5000/skipper:v0.27.57@sha256:abc":        "v0.27.57",
		"registry:5000/skipper@sha256:abc":                 "sha256:abc",
		"registry:5000/skipper":                            "",
		"traefik":                                          "",
		"ghcr.io/org/img:1.0":                              "1.0",
	} {
		if got := imageTag(ref); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", ref, got, want)
		}
	}
}
