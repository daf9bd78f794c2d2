package deploy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

// fakeAuthz answers SelfSubjectAccessReviews from allow, keyed by
// "verb resource[/sub].group ns", and records every review it got.
func fakeAuthz(allow func(a authorizationv1.ResourceAttributes) bool) (*fake.Clientset, *[]authorizationv1.ResourceAttributes) {
	var seen []authorizationv1.ResourceAttributes
	cs := fake.NewClientset()
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		r := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		a := *r.Spec.ResourceAttributes
		seen = append(seen, a)
		r.Status.Allowed = allow(a)
		return true, r, nil
	})
	return cs, &seen
}

func TestMissingPermissions(t *testing.T) {
	// A user who may do everything except delete pods and use the pod proxy.
	cs, seen := fakeAuthz(func(a authorizationv1.ResourceAttributes) bool {
		return !(a.Resource == "pods" && (a.Verb == "delete" || a.Subresource == "proxy"))
	})
	missing, err := MissingPermissions(context.Background(), cs.AuthorizationV1(), "epwindow-x7k2q")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range missing {
		got = append(got, p.String())
	}
	want := []string{
		"delete pods (in the run's namespace)",
		"get pods/proxy (in the run's namespace)",
		"create pods/proxy (in the run's namespace)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("missing = %q, want %q", got, want)
	}
	if n := len(RequiredPermissions(true)); len(*seen) != n {
		t.Errorf("%d reviews, want one per permission (%d)", len(*seen), n)
	}
	for _, a := range *seen {
		clusterScoped := a.Resource == "namespaces" || a.Resource == "ingressclasses" || a.Resource == "selfsubjectaccessreviews"
		if clusterScoped && a.Namespace != "" {
			t.Errorf("cluster-scoped %s checked in namespace %q", a.Resource, a.Namespace)
		}
		if !clusterScoped && a.Namespace != "epwindow-x7k2q" {
			t.Errorf("%s %s checked in namespace %q, want the run's", a.Verb, a.Resource, a.Namespace)
		}
	}

	err = &MissingError{Missing: missing, Manifest: "deploy/rbac/cluster"}
	for _, s := range append(want, "deploy/rbac/cluster", "nothing was created") {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}
}

func TestMissingPermissionsAllAllowed(t *testing.T) {
	cs, _ := fakeAuthz(func(authorizationv1.ResourceAttributes) bool { return true })
	missing, err := MissingPermissions(context.Background(), cs.AuthorizationV1(), "ns")
	if err != nil || len(missing) != 0 {
		t.Errorf("MissingPermissions = %v, %v; want none", missing, err)
	}
}

func TestCheckFixedNamespace(t *testing.T) {
	cs, seen := fakeAuthz(func(a authorizationv1.ResourceAttributes) bool { return a.Subresource != "portforward" })
	missing, err := Check(context.Background(), cs.AuthorizationV1(), "run-ns", ObserverPermissions("ingress-nginx"))
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 1 || missing[0].String() != "create pods/portforward -n ingress-nginx" {
		t.Errorf("missing = %v, want create pods/portforward -n ingress-nginx", missing)
	}
	for _, a := range *seen {
		if a.Namespace != "ingress-nginx" {
			t.Errorf("%s %s checked in %q, want the controller's namespace", a.Verb, a.Resource, a.Namespace)
		}
	}
}

func TestCheckError(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := MissingPermissions(context.Background(), cs.AuthorizationV1(), "ns"); err == nil || !strings.Contains(err.Error(), "SelfSubjectAccessReview") {
		t.Errorf("err = %v, want one naming the SelfSubjectAccessReview", err)
	}
}

// rule is one (group, resource, verb) a role grants or a Perm needs.
type rule struct{ group, resource, verb string }

func permRules(ps []Perm, scopes ...Scope) map[rule]bool {
	out := map[rule]bool{}
	for _, p := range ps {
		for _, s := range scopes {
			if p.Scope == s {
				r := p.Resource
				if p.Subresource != "" {
					r += "/" + p.Subresource
				}
				out[rule{p.Group, r, p.Verb}] = true
			}
		}
	}
	return out
}

func roleRules(t *testing.T, file string) map[rule]bool {
	t.Helper()
	data, err := files.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole // a Role has the same rules field
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	out := map[rule]bool{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" {
						t.Errorf("%s grants a wildcard (%q %q %q): name every verb", file, g, res, v)
					}
					out[rule{g, res, v}] = true
				}
			}
		}
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("%s: unexpected resourceNames/nonResourceURLs", file)
		}
	}
	return out
}

// TestRBACMatchesGo holds deploy/rbac/ and the Go lists together: every
// permission measure checks is granted, and nothing more is.
func TestRBACMatchesGo(t *testing.T) {
	// A variant grants what a run needs through either route.
	both := func(createNamespace bool) []Perm {
		return append(PermissionsFor(createNamespace, RouteIngress, GatewayRef{}),
			PermissionsFor(createNamespace, RouteHTTPRoute, GatewayRef{Namespace: "gw", Name: "traefik"})...)
	}
	target := append(TargetPermissions(RouteIngress, GatewayRef{}),
		TargetPermissions(RouteHTTPRoute, GatewayRef{Namespace: "gw", Name: "traefik"})...)
	tests := []struct {
		variant, file string
		want          map[rule]bool
	}{
		// The Gateway is read in its own namespace (ScopeFixed): the
		// ClusterRoles grant that, a Role in the run's namespace cannot.
		{"cluster", "rbac/cluster/clusterrole.yaml", permRules(both(true), ScopeCluster, ScopeRun, ScopeFixed)},
		{"namespaced", "rbac/namespaced/role.yaml", permRules(both(false), ScopeRun)},
		{"namespaced", "rbac/clusterread/clusterrole.yaml", permRules(both(false), ScopeCluster, ScopeFixed)},
		{"observer", "rbac/observer/role.yaml", permRules(ObserverPermissions("x"), ScopeFixed)},
		// measure --target: a Role in the team's namespace, and the same
		// read-only ClusterRole as the namespaced variant.
		{"target", "rbac/target/role.yaml", permRules(target, ScopeRun)},
		{"target", "rbac/clusterread/clusterrole.yaml", permRules(target, ScopeCluster, ScopeFixed)},
	}
	for _, tt := range tests {
		t.Run(tt.variant+"/"+tt.file, func(t *testing.T) {
			got := roleRules(t, tt.file)
			for r := range tt.want {
				if !got[r] {
					t.Errorf("%s does not grant %s", tt.file, fmtRule(r))
				}
			}
			for r := range got {
				if !tt.want[r] {
					t.Errorf("%s grants %s, which the Go list does not need", tt.file, fmtRule(r))
				}
			}
		})
	}
	// The namespaced variant never touches namespaces.
	for _, p := range both(false) {
		if p.Resource == "namespaces" {
			t.Errorf("RequiredPermissions(false) has %s", p)
		}
	}
}

func fmtRule(r rule) string { return fmt.Sprintf("%s %s (group %q)", r.verb, r.resource, r.group) }

// In an existing namespace (measure --namespace) the error names it, so the
// fix reads like kubectl auth can-i, and points at the namespaced variant.
func TestMissingErrorNamespaced(t *testing.T) {
	cs, _ := fakeAuthz(func(a authorizationv1.ResourceAttributes) bool { return a.Resource != "ingresses" })
	missing, err := Check(context.Background(), cs.AuthorizationV1(), "team-a", RequiredPermissions(false))
	if err != nil {
		t.Fatal(err)
	}
	msg := (&MissingError{Missing: missing, Manifest: "deploy/rbac/namespaced", Namespace: "team-a"}).Error()
	for _, s := range []string{"create ingresses.networking.k8s.io -n team-a", "get ingresses.networking.k8s.io -n team-a",
		"delete ingresses.networking.k8s.io -n team-a", "deploy/rbac/namespaced", "missing 3 permission(s)"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not name %q", msg, s)
		}
	}
	if strings.Contains(msg, "namespaces") {
		t.Errorf("error %q asks for namespace permissions the namespaced variant does not need", msg)
	}
}

// An HTTPRoute run is checked for the HTTPRoute and the Gateway API reads,
// the Gateway in its own namespace, and not for the Ingress it does not
// create; an Ingress run the other way round.
func TestPermissionsForRoute(t *testing.T) {
	gw := GatewayRef{Namespace: "gw", Name: "traefik"}
	has := func(ps []Perm, s string) bool {
		for _, p := range ps {
			if p.String() == s {
				return true
			}
		}
		return false
	}
	tests := []struct {
		name            string
		createNamespace bool
		route           string
		want, not       []string
	}{
		{"httproute, own namespace", true, RouteHTTPRoute,
			[]string{"create httproutes.gateway.networking.k8s.io (in the run's namespace)", "get httproutes.gateway.networking.k8s.io (in the run's namespace)",
				"get gateways.gateway.networking.k8s.io -n gw", "get gatewayclasses.gateway.networking.k8s.io"},
			[]string{"create ingresses.networking.k8s.io (in the run's namespace)", "list ingressclasses.networking.k8s.io",
				"delete httproutes.gateway.networking.k8s.io (in the run's namespace)"}},
		{"httproute, existing namespace", false, RouteHTTPRoute,
			[]string{"delete httproutes.gateway.networking.k8s.io (in the run's namespace)", "get gateways.gateway.networking.k8s.io -n gw"},
			[]string{"delete ingresses.networking.k8s.io (in the run's namespace)"}},
		{"ingress", true, RouteIngress,
			[]string{"create ingresses.networking.k8s.io (in the run's namespace)", "list ingressclasses.networking.k8s.io"},
			[]string{"create httproutes.gateway.networking.k8s.io (in the run's namespace)", "get gateways.gateway.networking.k8s.io -n gw",
				"get gatewayclasses.gateway.networking.k8s.io"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := PermissionsFor(tt.createNamespace, tt.route, gw)
			for _, s := range tt.want {
				if !has(ps, s) {
					t.Errorf("missing %q", s)
				}
			}
			for _, s := range tt.not {
				if has(ps, s) {
					t.Errorf("has %q, which this run does not need", s)
				}
			}
		})
	}
	// The preflight asks for the Gateway in its namespace.
	cs, seen := fakeAuthz(func(authorizationv1.ResourceAttributes) bool { return true })
	if _, err := Check(context.Background(), cs.AuthorizationV1(), "epwindow-x7k2q", PermissionsFor(true, RouteHTTPRoute, gw)); err != nil {
		t.Fatal(err)
	}
	for _, a := range *seen {
		switch a.Resource {
		case "gateways":
			if a.Namespace != "gw" || a.Group != GatewayGroup {
				t.Errorf("gateways checked in %q (group %q), want the Gateway's namespace gw", a.Namespace, a.Group)
			}
		case "gatewayclasses":
			if a.Namespace != "" {
				t.Errorf("cluster-scoped gatewayclasses checked in namespace %q", a.Namespace)
			}
		case "httproutes":
			if a.Namespace != "epwindow-x7k2q" {
				t.Errorf("httproutes checked in %q, want the run's namespace", a.Namespace)
			}
		}
	}
}

// measure --target changes nothing in the team's namespace but the
// Deployment's template (patch) and one pod at a time (an eviction): it
// creates and deletes nothing else, and reads through the route it is given.
func TestTargetPermissions(t *testing.T) {
	gw := GatewayRef{Namespace: "gw", Name: "traefik"}
	strs := func(ps []Perm) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.String())
		}
		return out
	}
	common := []string{
		"get deployments.apps (in the run's namespace)", "patch deployments.apps (in the run's namespace)",
		"get pods (in the run's namespace)", "list pods (in the run's namespace)", "watch pods (in the run's namespace)",
		"create pods/eviction (in the run's namespace)", "get pods/proxy (in the run's namespace)",
		"list services (in the run's namespace)",
		"list endpointslices.discovery.k8s.io (in the run's namespace)", "watch endpointslices.discovery.k8s.io (in the run's namespace)",
		"list poddisruptionbudgets.policy (in the run's namespace)",
		"create selfsubjectaccessreviews.authorization.k8s.io",
	}
	tests := []struct {
		route     string
		want, not []string
	}{
		{RouteIngress,
			[]string{"list ingresses.networking.k8s.io (in the run's namespace)", "get ingressclasses.networking.k8s.io", "list ingressclasses.networking.k8s.io"},
			[]string{"list httproutes.gateway.networking.k8s.io (in the run's namespace)", "get gateways.gateway.networking.k8s.io -n gw"}},
		{RouteHTTPRoute,
			[]string{"list httproutes.gateway.networking.k8s.io (in the run's namespace)", "get gateways.gateway.networking.k8s.io -n gw",
				"get gatewayclasses.gateway.networking.k8s.io"},
			[]string{"list ingresses.networking.k8s.io (in the run's namespace)", "list ingressclasses.networking.k8s.io"}},
	}
	for _, tt := range tests {
		t.Run(tt.route, func(t *testing.T) {
			ps := TargetPermissions(tt.route, gw)
			got := strs(ps)
			for _, s := range append(common, tt.want...) {
				if !slices.Contains(got, s) {
					t.Errorf("missing %q", s)
				}
			}
			for _, s := range tt.not {
				if slices.Contains(got, s) {
					t.Errorf("has %q, which this route does not need", s)
				}
			}
			if n := len(common) + len(tt.want); len(got) != n {
				t.Errorf("%d permissions, want %d: %q", len(got), n, got)
			}
			for _, p := range ps {
				if p.Verb == "delete" || (p.Verb == "create" && p.Subresource != "eviction" && p.Resource != "selfsubjectaccessreviews") {
					t.Errorf("%s: measure --target creates and deletes nothing of its own", p)
				}
				if p.Why == "" {
					t.Errorf("%s has no reason", p)
				}
			}
		})
	}
}
