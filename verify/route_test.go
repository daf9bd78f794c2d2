package verify

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/epwindow/epwindow/deploy"
)

func service(ns, name string, sel map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Selector: sel}}
}

func ingress(ns, name, host string, paths map[string]string) *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	var ps []networkingv1.HTTPIngressPath
	for p, svc := range paths {
		ps = append(ps, networkingv1.HTTPIngressPath{Path: p, PathType: &prefix, Backend: networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}})
	}
	return &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: networkingv1.IngressSpec{
		Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: ps}}}}}}
}

func httpRoute(ns, name, host, svc string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{"hostnames": []any{host}, "rules": []any{map[string]any{
			"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/"}}},
			"backendRefs": []any{map[string]any{"name": svc, "port": int64(80)}}}}},
	}}
}

// TestCheckRoute: the route of --host/--path must lead to a Service that
// selects the Deployment's pods; a wrong --host that lands on another
// team's always-200 backend is refused, naming where it leads.
func TestCheckRoute(t *testing.T) {
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "fe"}}}}}
	client := fake.NewSimpleClientset(
		service("shop", "web", map[string]string{"app": "web"}),
		service("shop", "api", map[string]string{"app": "api"}),
		service("other", "echo", map[string]string{"app": "echo"}),
		ingress("shop", "web", "web.local", map[string]string{"/": "web", "/api": "api"}),
		ingress("shop", "wild", "*.shop.local", map[string]string{"/": "web"}),
		ingress("other", "echo", "echo.local", map[string]string{"/": "echo"}),
	)
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{deploy.HTTPRouteResource: "HTTPRouteList"},
		httpRoute("shop", "gw", "gw.local", "web"), httpRoute("other", "gw-echo", "gw-echo.local", "echo"))
	for _, tc := range []struct {
		host, path string
		ok         bool
		want       string
	}{
		{"web.local", "/", true, "Ingress shop/web -> Service shop/web selects the pods"},
		{"web.local", "/apix", true, "Ingress shop/web"},
		{"a.shop.local", "/", true, "Ingress shop/wild"},
		{"gw.local", "/", true, "HTTPRoute shop/gw -> Service shop/web"},
		{"web.local", "/api/v1", false, "Ingress shop/web -> Service shop/api (selector app=api)"},
		{"echo.local", "/", false, "Ingress other/echo -> Service other/echo (selector app=echo)"},
		{"gw-echo.local", "/", false, "HTTPRoute other/gw-echo -> Service other/echo"},
		{"a.b.shop.local", "/", false, "no Ingress or HTTPRoute in namespace shop routes host"},
	} {
		t.Run(tc.host+tc.path, func(t *testing.T) {
			r := &runner{cfg: Config{Client: client, Dynamic: dyn, Host: tc.host, URL: &url.URL{Scheme: "http", Host: "127.0.0.1:9090", Path: tc.path}}}
			got, err := r.checkRoute(context.Background(), web)
			var ue *UsageError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && !errors.As(err, &ue):
				t.Fatalf("got %q, %v; want a usage error (exit 2)", got, err)
			case !tc.ok:
				got = err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("%q lacks %q", got, tc.want)
			}
		})
	}
}
