package verify

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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

// ingressOf is an Ingress of class (nil: none named) with one rule for host
// ("": any host), path / to svc.
func ingressOf(ns, name, class, host, svc string) *networkingv1.Ingress {
	ing := ingress(ns, name, host, map[string]string{"/": svc})
	if class != "" {
		ing.Spec.IngressClassName = &class
	}
	return ing
}

// gwRoute is an HTTPRoute attached to the Gateway parent ("ns/name") with
// hostnames hosts (none: any host), path / to svc.
func gwRoute(ns, name, parent, svc string, hosts ...string) *unstructured.Unstructured {
	u := httpRoute(ns, name, "", svc)
	spec := u.Object["spec"].(map[string]any)
	if len(hosts) == 0 {
		delete(spec, "hostnames")
	} else {
		hs := make([]any, len(hosts))
		for i, h := range hosts {
			hs[i] = h
		}
		spec["hostnames"] = hs
	}
	gwNS, gwName, _ := strings.Cut(parent, "/")
	spec["parentRefs"] = []any{map[string]any{"namespace": gwNS, "name": gwName}}
	return u
}

// TestCheckRoutePrecedence: hostnames match as the controller matches them
// (a Gateway API wildcard is a suffix of one or more labels, an Ingress
// wildcard one label), and the route the controller picks for the host
// decides, wherever its namespace: a more specific host elsewhere, served
// by the same controller (Ingress class, or Gateway), beats the
// Deployment's own namespace's wildcard or catch-all.
func TestCheckRoutePrecedence(t *testing.T) {
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}}}
	services := []runtime.Object{
		service("shop", "web", map[string]string{"app": "web"}),
		service("other", "echo", map[string]string{"app": "echo"}),
	}
	for _, tc := range []struct {
		name      string
		host      string
		ingresses []*networkingv1.Ingress
		routes    []*unstructured.Unstructured
		ok        bool
		want      string
	}{
		{name: "gateway wildcard matches two labels", host: "a.b.example.com",
			routes: []*unstructured.Unstructured{gwRoute("shop", "wild", "infra/gw", "web", "*.example.com")},
			ok:     true, want: "HTTPRoute shop/wild -> Service shop/web selects the pods"},
		{name: "gateway wildcard does not match its own suffix", host: "example.com",
			routes: []*unstructured.Unstructured{gwRoute("shop", "wild", "infra/gw", "web", "*.example.com")},
			want:   "no Ingress or HTTPRoute in namespace shop routes host"},
		{name: "ingress wildcard matches one label only", host: "a.b.example.com",
			ingresses: []*networkingv1.Ingress{ingressOf("shop", "wild", "skipper", "*.example.com", "web")},
			want:      "no Ingress or HTTPRoute in namespace shop routes host"},
		{name: "exact ingress host elsewhere beats own wildcard", host: "pay.example.com",
			ingresses: []*networkingv1.Ingress{ingressOf("shop", "wild", "skipper", "*.example.com", "web"), ingressOf("other", "pay", "skipper", "pay.example.com", "echo")},
			want:      "Ingress other/pay -> Service other/echo (selector app=echo)"},
		{name: "exact ingress host elsewhere beats own catch-all", host: "pay.example.com",
			ingresses: []*networkingv1.Ingress{ingressOf("shop", "all", "skipper", "", "web"), ingressOf("other", "pay", "skipper", "pay.example.com", "echo")},
			want:      "Ingress other/pay -> Service other/echo"},
		{name: "exact ingress host of another class does not compete", host: "pay.example.com",
			ingresses: []*networkingv1.Ingress{ingressOf("shop", "wild", "skipper", "*.example.com", "web"), ingressOf("other", "pay", "traefik", "pay.example.com", "echo")},
			ok:        true, want: "Ingress shop/wild -> Service shop/web"},
		{name: "own exact host beats a wildcard elsewhere", host: "pay.example.com",
			ingresses: []*networkingv1.Ingress{ingressOf("shop", "pay", "skipper", "pay.example.com", "web"), ingressOf("other", "wild", "skipper", "*.example.com", "echo")},
			ok:        true, want: "Ingress shop/pay -> Service shop/web"},
		{name: "exact route hostname elsewhere beats own gateway wildcard", host: "pay.example.com",
			routes: []*unstructured.Unstructured{gwRoute("shop", "wild", "infra/gw", "web", "*.example.com"), gwRoute("other", "pay", "infra/gw", "echo", "pay.example.com")},
			want:   "HTTPRoute other/pay -> Service other/echo"},
		{name: "route hostname elsewhere beats own route without hostnames", host: "pay.example.com",
			routes: []*unstructured.Unstructured{gwRoute("shop", "all", "infra/gw", "web"), gwRoute("other", "pay", "infra/gw", "echo", "*.example.com")},
			want:   "HTTPRoute other/pay -> Service other/echo"},
		{name: "longer gateway wildcard elsewhere beats own shorter one", host: "a.pay.example.com",
			routes: []*unstructured.Unstructured{gwRoute("shop", "wild", "infra/gw", "web", "*.example.com"), gwRoute("other", "pay", "infra/gw", "echo", "*.pay.example.com")},
			want:   "HTTPRoute other/pay -> Service other/echo"},
		{name: "route on another gateway does not compete", host: "pay.example.com",
			routes: []*unstructured.Unstructured{gwRoute("shop", "wild", "infra/gw", "web", "*.example.com"), gwRoute("other", "pay", "infra/internal", "echo", "pay.example.com")},
			ok:     true, want: "HTTPRoute shop/wild -> Service shop/web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append([]runtime.Object(nil), services...)
			for _, ing := range tc.ingresses {
				objs = append(objs, ing)
			}
			var routes []runtime.Object
			for _, r := range tc.routes {
				routes = append(routes, r)
			}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{deploy.HTTPRouteResource: "HTTPRouteList"}, routes...)
			r := &runner{cfg: Config{Client: fake.NewSimpleClientset(objs...), Dynamic: dyn, Host: tc.host, URL: &url.URL{Scheme: "http", Host: "127.0.0.1:9090", Path: "/"}}}
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

// TestCheckRouteForbiddenElsewhere: when routes in other namespaces may not
// be listed, a more specific route there cannot be looked for, so the check
// is not done: it must refuse (a missing permission, exit 5, nothing
// changed) and name the permission, its scope and how to grant it, never
// pass as if checked. Routes of a kind that cannot compete with the
// Deployment's own route need no permission.
func TestCheckRouteForbiddenElsewhere(t *testing.T) {
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}}}
	// Everywhere but in the namespace: what a RoleBinding in shop grants.
	forbidElsewhere := func(gr schema.GroupResource) k8stesting.ReactionFunc {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetNamespace() != metav1.NamespaceAll {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(gr, "", errors.New(`User "ci" cannot list resource at the cluster scope`))
		}
	}
	ingresses := schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"}
	httproutes := deploy.HTTPRouteResource.GroupResource()
	for _, tc := range []struct {
		name      string
		ingress   bool // the own route is an Ingress, else an HTTPRoute
		forbidden []schema.GroupResource
		ok        bool
		want      []string
	}{
		{name: "ingresses elsewhere forbidden", ingress: true, forbidden: []schema.GroupResource{ingresses},
			want: []string{"list ingresses.networking.k8s.io", "at cluster scope", "kubectl create clusterrole", "--verb=list --resource=ingresses.networking.k8s.io", "--route-check=false"}},
		{name: "httproutes elsewhere forbidden", forbidden: []schema.GroupResource{httproutes},
			want: []string{"list httproutes.gateway.networking.k8s.io", "at cluster scope", "--resource=httproutes.gateway.networking.k8s.io"}},
		{name: "both forbidden, an Ingress needs only ingresses", ingress: true, forbidden: []schema.GroupResource{ingresses, httproutes},
			want: []string{"missing 1 permission(s)", "list ingresses.networking.k8s.io"}},
		{name: "httproutes elsewhere cannot beat an Ingress", ingress: true, forbidden: []schema.GroupResource{httproutes},
			ok: true, want: []string{"Ingress shop/web -> Service shop/web selects the pods"}},
		{name: "ingresses elsewhere cannot beat an HTTPRoute", forbidden: []schema.GroupResource{ingresses},
			ok: true, want: []string{"HTTPRoute shop/gw -> Service shop/web selects the pods"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{service("shop", "web", map[string]string{"app": "web"})}
			var routes []runtime.Object
			if tc.ingress {
				objs = append(objs, ingressOf("shop", "web", "skipper", "*.example.com", "web"))
			} else {
				routes = append(routes, gwRoute("shop", "gw", "infra/gw", "web", "*.example.com"))
			}
			client := fake.NewSimpleClientset(objs...)
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{deploy.HTTPRouteResource: "HTTPRouteList"}, routes...)
			for _, gr := range tc.forbidden {
				if gr == ingresses {
					client.PrependReactor("list", gr.Resource, forbidElsewhere(gr))
				} else {
					dyn.PrependReactor("list", gr.Resource, forbidElsewhere(gr))
				}
			}
			r := &runner{cfg: Config{Client: client, Dynamic: dyn, Host: "pay.example.com", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:9090", Path: "/"}}}
			got, err := r.checkRoute(context.Background(), web)
			var missing *MissingError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && !errors.As(err, &missing):
				t.Fatalf("got %q, %v; want a missing permission (exit 5), not a pass", got, err)
			case !tc.ok:
				if !strings.HasPrefix(got, "not checked") {
					t.Errorf("route check %q: want it to say not checked", got)
				}
				got = err.Error()
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
		})
	}
}

// TestRunRouteNotChecked: a route check that could not be made stops the
// run before anything changes, as a missing permission (exit 5), and the
// report says "not checked" under a verdict that does not pass.
func TestRunRouteNotChecked(t *testing.T) {
	two := int32(2)
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:   appsv1.DeploymentSpec{Replicas: &two, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}},
		Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}}
	client := fake.NewSimpleClientset(web, service("shop", "web", map[string]string{"app": "web"}),
		ingressOf("shop", "web", "skipper", "*.example.com", "web"))
	// Preflight: every permission it checks is granted.
	client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		review.Status.Allowed = true
		return true, review, nil
	})
	client.PrependReactor("list", "ingresses", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != metav1.NamespaceAll {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"}, "", errors.New("RBAC: denied"))
	})
	cfg := Config{Client: client, Namespace: "shop", Deployment: "web", Host: "pay.example.com",
		URL: &url.URL{Scheme: "http", Host: "127.0.0.1:9090", Path: "/"}, Method: "GET", Rate: 50,
		LoadTimeout: time.Second, Rollouts: 1, Timeout: time.Minute}
	rep, err := Run(context.Background(), cfg, nil)
	var missing *MissingError
	if !errors.As(err, &missing) {
		t.Fatalf("Run: %v; want a missing permission (exit 5)", err)
	}
	if rep == nil || rep.Verdict.Pass || !strings.HasPrefix(rep.RouteCheck, "not checked") {
		t.Fatalf("report %+v: want route not checked and no pass", rep)
	}
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && !(v == "create" && a.GetResource().Resource == "selfsubjectaccessreviews") {
			t.Errorf("%s %s before the route was checked: nothing may change", v, a.GetResource().Resource)
		}
	}
}
