// Package traefik tests the local cluster's Traefik (`up --ingress all`):
// the Gateway API CRDs, Traefik's GatewayClass and Gateway accepted by
// Traefik itself, the IngressClasses, a probe workload served through each
// of Traefik's three providers (Ingress class traefik, ingress-nginx class
// nginx, and an HTTPRoute on the Gateway) next to Skipper and through
// kube-proxy's ClusterIP, and a teardown that leaves no Traefik process.
// The cluster starts in a user's environment that points elsewhere
// (KUBECONFIG for another cluster, proxy variables): every data plane still
// serves the local cluster, and no child process carries any of it.
package traefik

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
	foreignEnvironment(t)
	// kube-proxy runs (nftables, the default) so that its data plane is
	// held to the same environment as the ingresses'.
	c, err := localcluster.Start(ctx, localcluster.Options{Nodes: 2, Dir: dir, Ingress: "all", TraefikThrottle: 200 * time.Millisecond})
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
	// kube-proxy routes the workload's ClusterIP from the root namespace.
	svc, err := c.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterIP := "http://" + svc.Spec.ClusterIP + ":80"
	if err := testenv.Poll(ctx, "kube-proxy", 200*time.Millisecond, time.Minute, func() (bool, error) {
		return answers(ctx, clusterIP, "any.test"), nil
	}); err != nil {
		t.Errorf("kube-proxy never routed ClusterIP %s: %v", clusterIP, err)
	}
	checkChildEnvironments(t, c.PID)
	if b, err := os.ReadFile(filepath.Join(dir, "traefik.log")); err != nil || bytes.Contains(b, []byte("KUBECONFIG")) {
		t.Errorf("traefik.log (%v) mentions KUBECONFIG: Traefik read the user's kubeconfig", err)
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

// foreignKeys are the variables foreignEnvironment sets, none of which may
// reach a child of the local cluster.
var foreignKeys = []string{"KUBECONFIG", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
	"EPWINDOW_E2E_USER_MARKER"}

// foreignEnvironment exports what a Kubernetes user's shell typically has,
// pointing at another cluster: KUBECONFIG names a kubeconfig (current
// context, token) whose server is a closed loopback port, and the proxy
// variables name that port too (127.0.0.1:1: nothing listens there, and
// nothing leaves the machine). Go never proxies loopback requests
// (net/http/httpproxy, useProxy), so the test's own clients are unaffected;
// a child that honoured these would watch nothing or send its upstream
// traffic nowhere. A marker variable stands for everything else of the
// user's.
func foreignEnvironment(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "other-cluster.kubeconfig")
	const other = `apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: other
  user:
    token: a-token-for-another-cluster
contexts:
- name: other
  context: {cluster: other, user: other, namespace: elsewhere}
current-context: other
`
	if err := os.WriteFile(kubeconfig, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range foreignKeys {
		v := "http://127.0.0.1:1"
		switch k {
		case "KUBECONFIG":
			v = kubeconfig
		case "EPWINDOW_E2E_USER_MARKER":
			v = "1"
		}
		t.Setenv(k, v)
	}
}

// checkChildEnvironments reads the environment of every process below
// epwindow-local (Skipper, Traefik, kube-proxy, the container shims and
// the probe pods' processes) and fails on any variable of
// foreignEnvironment's. At least Skipper, Traefik and kube-proxy must be
// found, so that the check cannot pass by reading nothing.
func checkChildEnvironments(t *testing.T, root int) {
	t.Helper()
	children := descendants(t, root)
	seen := map[string]bool{}
	for _, pid := range children {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cmd := strings.ReplaceAll(strings.TrimRight(string(comm), "\x00"), "\x00", " ")
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue // exited meanwhile
		}
		for _, name := range []string{"skipper", "traefik", "kube-proxy", "probe"} {
			if strings.Contains(cmd, name) {
				seen[name] = true
			}
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			k, _, _ := strings.Cut(kv, "=")
			for _, bad := range foreignKeys {
				if k == bad {
					t.Errorf("pid %d (%s) has %s from the user's environment", pid, cmd, kv)
				}
			}
		}
	}
	for _, want := range []string{"skipper", "traefik", "kube-proxy", "probe"} {
		if !seen[want] {
			t.Errorf("no %s process among the %d below epwindow-local (pid %d)", want, len(children), root)
		}
	}
}

// descendants lists the processes below root, from /proc/PID/stat's ppid.
func descendants(t *testing.T, root int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after ")".
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) > 1 {
			parent[pid], _ = strconv.Atoi(fields[1])
		}
	}
	var out []int
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// TestMain runs the tests in namespaces of their own, so that the clusters
// they start run beside other packages' (localcluster.Isolate).
func TestMain(m *testing.M) { localcluster.IsolatedMain(m) }
