package verify

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/epwindow/epwindow/deploy"
)

// backend is one route's match for --host/--path and the Service it sends
// to.
type backend struct {
	// Route reads "Ingress shop/web" or "HTTPRoute shop/web".
	Route string
	// RouteNS is the route's namespace; Namespace and Service name the
	// Service it sends to.
	RouteNS   string
	Namespace string
	Service   string
	// score orders matches as controllers do: by host (hostScore), then
	// the longer path, an exact path first.
	score int
	// The controller that serves the route: routes of different ones do
	// not compete for a request. An Ingress's class ("": none named, so
	// the default class, whichever that is), or an HTTPRoute's parent
	// Gateways ("namespace/name").
	gateway bool
	class   string
	parents []string
}

// hostScore is how specifically a route's host rule matches host, 0 for no
// match: an exact host before a wildcard before none (any host), and among
// wildcards the longer. An Ingress wildcard covers one leading label
// (networking/v1 IngressRule.Host: "matches only a single label"); a
// Gateway API wildcard is a suffix match of one or more labels
// (gateway-api apis/v1/httproute_types.go, HTTPRouteSpec.Hostnames:
// "Hostnames that are prefixed with a wildcard label (`*.`) are
// interpreted as a suffix match. That means that a match for
// `*.example.com` would match both `test.example.com`, and
// `foo.test.example.com`, but not `example.com`"). The order is the Gateway
// API's precedence across routes (same comment: "precedence must be given
// to rules from the HTTPRoute with the largest number of: Characters in a
// matching non-wildcard hostname. Characters in a matching hostname."), an
// exact host being the longest non-wildcard match and no hostname none;
// Ingress controllers rank an exact host before a wildcard before a
// catch-all rule alike.
func hostScore(rule, host string, gateway bool) int {
	const exact, wildcard, catchAll = 3, 2, 1
	// A hostname is at most 253 characters (RFC 1123): the length fits
	// below the tier.
	tier := func(t int) int { return t<<8 + len(rule) }
	switch {
	case rule == "":
		return tier(catchAll)
	case strings.EqualFold(rule, host):
		return tier(exact)
	case strings.HasPrefix(rule, "*."):
		suffix := rule[1:] // ".example.com"
		if gateway {
			if len(host) > len(suffix) && strings.EqualFold(host[len(host)-len(suffix):], suffix) {
				return tier(wildcard)
			}
			return 0
		}
		if _, rest, ok := strings.Cut(host, "."); ok && strings.EqualFold("."+rest, suffix) {
			return tier(wildcard)
		}
	}
	return 0
}

// sameController reports whether a and b may be served by one controller,
// and so compete for a request: both Ingresses of one class (or one naming
// none: the default class may be any), or both HTTPRoutes sharing a parent
// Gateway (or one with no parent named).
func sameController(a, b backend) bool {
	if a.gateway != b.gateway {
		return false
	}
	if !a.gateway {
		return a.class == "" || b.class == "" || a.class == b.class
	}
	if len(a.parents) == 0 || len(b.parents) == 0 {
		return true
	}
	for _, p := range a.parents {
		if slices.Contains(b.parents, p) {
			return true
		}
	}
	return false
}

// pathScore is how a rule's path matches p: 0 none, else the matched
// length, exact ahead of any prefix. A prefix matches whole path elements
// (networking/v1 HTTPIngressPath: "/foo" matches "/foo/bar", not
// "/foobar"); ImplementationSpecific is taken as a prefix.
func pathScore(kind, rule, p string) int {
	if rule == "" {
		rule = "/"
	}
	switch kind {
	case "Exact":
		if rule == p {
			return 1<<16 + len(rule)
		}
		return 0
	case "RegularExpression":
		return 0
	}
	r := strings.TrimSuffix(rule, "/")
	if r == "" || p == r || strings.HasPrefix(p, r+"/") {
		return 1 + len(r)
	}
	return 0
}

// ingressBackends lists the backends of the Ingress's rules that match
// host and path, best first by score; the default backend matches last.
func ingressBackends(ing *networkingv1.Ingress, host, path string) []backend {
	var out []backend
	name := "Ingress " + ing.Namespace + "/" + ing.Name
	class := ing.Annotations["kubernetes.io/ingress.class"]
	if ing.Spec.IngressClassName != nil {
		class = *ing.Spec.IngressClassName
	}
	for _, rule := range ing.Spec.Rules {
		hs := hostScore(rule.Host, host, false)
		if hs == 0 || rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			kind := "Prefix"
			if p.PathType != nil {
				kind = string(*p.PathType)
			}
			if ps := pathScore(kind, p.Path, path); ps > 0 && p.Backend.Service != nil {
				out = append(out, backend{Route: name, RouteNS: ing.Namespace, Namespace: ing.Namespace, Service: p.Backend.Service.Name, score: hs<<20 + ps, class: class})
			}
		}
	}
	if b := ing.Spec.DefaultBackend; b != nil && b.Service != nil {
		out = append(out, backend{Route: name + " (default backend)", RouteNS: ing.Namespace, Namespace: ing.Namespace, Service: b.Service.Name, class: class})
	}
	return out
}

// httpRouteBackends lists the Service backends of an HTTPRoute's rules
// whose hostnames and path matches take host and path.
func httpRouteBackends(u *unstructured.Unstructured, host, path string) []backend {
	hostnames, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "hostnames")
	hs := hostScore("", host, true)
	if len(hostnames) > 0 {
		hs = 0
		for _, h := range hostnames {
			hs = max(hs, hostScore(h, host, true))
		}
	}
	if hs == 0 {
		return nil
	}
	name := "HTTPRoute " + u.GetNamespace() + "/" + u.GetName()
	// Parents are Gateways unless a group or kind says otherwise; the
	// namespace defaults to the route's (gateway-api ParentReference).
	refs, _, _ := unstructured.NestedSlice(u.Object, "spec", "parentRefs")
	var parents []string
	for _, ref := range refs {
		rm, _ := ref.(map[string]any)
		kind, _, _ := unstructured.NestedString(rm, "kind")
		if kind != "" && kind != "Gateway" {
			continue
		}
		ns, _, _ := unstructured.NestedString(rm, "namespace")
		if ns == "" {
			ns = u.GetNamespace()
		}
		gw, _, _ := unstructured.NestedString(rm, "name")
		parents = append(parents, ns+"/"+gw)
	}
	rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
	var out []backend
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		matches, _, _ := unstructured.NestedSlice(rule, "matches")
		best := 0
		if len(matches) == 0 {
			best = pathScore("PathPrefix", "/", path)
		}
		for _, m := range matches {
			mm, _ := m.(map[string]any)
			kind, _, _ := unstructured.NestedString(mm, "path", "type")
			value, _, _ := unstructured.NestedString(mm, "path", "value")
			if kind == "" {
				kind = "PathPrefix"
			}
			best = max(best, pathScore(kind, value, path))
		}
		if best == 0 {
			continue
		}
		refs, _, _ := unstructured.NestedSlice(rule, "backendRefs")
		for _, ref := range refs {
			rm, _ := ref.(map[string]any)
			group, _, _ := unstructured.NestedString(rm, "group")
			kind, _, _ := unstructured.NestedString(rm, "kind")
			if group != "" || kind != "" && kind != "Service" {
				continue
			}
			svc, _, _ := unstructured.NestedString(rm, "name")
			ns, _, _ := unstructured.NestedString(rm, "namespace")
			if ns == "" {
				ns = u.GetNamespace()
			}
			out = append(out, backend{Route: name, RouteNS: u.GetNamespace(), Namespace: ns, Service: svc, score: hs<<20 + best,
				gateway: true, parents: parents})
		}
	}
	return out
}

// routeHost is the host the route is looked up by: --host, else --url's.
func (c Config) routeHost() string {
	h := c.Host
	if h == "" && c.URL != nil {
		h = c.URL.Host
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return h
}

// checkRoute finds the Ingress or HTTPRoute that routes --host/--path and
// the Service it sends to, and checks that the Service selects the
// Deployment's pods: a wrong --host that lands on another backend
// answering 2xx would otherwise pass every rollout while testing nothing.
// It reads the Deployment's namespace and every namespace: a more specific
// route elsewhere on the same controller takes the request (contenders),
// and a wrong route is named where it leads. It returns what the report
// says of the route. When routes of the kind that routes --host may not be
// listed in every namespace, the check cannot be made: a *MissingError
// (exit 5, nothing changed) naming the permission, and "not checked".
func (r *runner) checkRoute(ctx context.Context, d *appsv1.Deployment) (string, error) {
	cfg := r.cfg
	host, path := cfg.routeHost(), cfg.URL.Path
	if path == "" {
		path = "/"
	}
	own, _, err := r.routeBackends(ctx, d.Namespace, host, path)
	if err != nil {
		return "", err
	}
	// Other namespaces' routes: where a wrong route leads, or a more
	// specific one that wins.
	all, unread, err := r.routeBackends(ctx, metav1.NamespaceAll, host, path)
	if err != nil {
		return "", err
	}
	var others []backend
	for _, b := range all {
		if b.RouteNS != d.Namespace {
			others = append(others, b)
		}
	}
	if missing := unreadContenders(own, unread); len(missing) > 0 {
		return fmt.Sprintf("not checked: a more specific route in another namespace could not be looked for (%s)", missing[0]),
			&MissingError{Missing: missing}
	}
	found := contenders(own, others)
	if len(found) == 0 {
		return "", usage("no Ingress or HTTPRoute in namespace %s routes host %q path %s: check --%s and --%s, or pass --%s=false if the route is not one the cluster holds (an external load balancer)",
			d.Namespace, host, path, FlagHost, FlagPath, FlagRouteCheck)
	}
	top := found[0].score
	var leads []string
	podLabels := labels.Set(d.Spec.Template.Labels)
	for _, b := range found {
		if b.score != top {
			continue
		}
		svc, err := cfg.Client.CoreV1().Services(b.Namespace).Get(ctx, b.Service, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			leads = append(leads, fmt.Sprintf("%s -> Service %s/%s, which does not exist", b.Route, b.Namespace, b.Service))
			continue
		case err != nil && b.Namespace != d.Namespace:
			leads = append(leads, fmt.Sprintf("%s -> Service %s/%s (not readable here: %v)", b.Route, b.Namespace, b.Service, err))
			continue
		case err != nil:
			return "", fmt.Errorf("get service %s/%s (the backend of %s): %w", b.Namespace, b.Service, b.Route, err)
		}
		if b.Namespace == d.Namespace && len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			return fmt.Sprintf("%s -> Service %s/%s selects the pods of deployment/%s", b.Route, b.Namespace, b.Service, d.Name), nil
		}
		leads = append(leads, fmt.Sprintf("%s -> Service %s/%s (selector %s)", b.Route, b.Namespace, b.Service, labels.Set(svc.Spec.Selector)))
	}
	return "", usage("host %q path %s leads to %s, not to the pods of deployment %s/%s (labels %s): the load would test another backend; check --%s and --%s (or --%s=false)",
		host, path, strings.Join(leads, "; "), d.Namespace, d.Name, podLabels, FlagHost, FlagPath, FlagRouteCheck)
}

// unreadable says which kinds of route a list was refused (RBAC) for.
type unreadable struct{ ingresses, httproutes bool }

// unreadContenders are the permissions the route check lacks to find every
// contender of own's best matches in other namespaces: list, at cluster
// scope, of the kind of route (Ingress or HTTPRoute) of one of them; the
// other kind is another controller's and cannot take the request. Without
// a match in own there is nothing to beat: none.
func unreadContenders(own []backend, unread unreadable) []deploy.Perm {
	var ingresses, httproutes bool
	for _, b := range own {
		if b.score != own[0].score {
			break
		}
		ingresses = ingresses || !b.gateway && unread.ingresses
		httproutes = httproutes || b.gateway && unread.httproutes
	}
	var out []deploy.Perm
	if ingresses {
		out = append(out, clusterRouteList("networking.k8s.io", "ingresses"))
	}
	if httproutes {
		out = append(out, clusterRouteList(deploy.HTTPRouteResource.Group, deploy.HTTPRouteResource.Resource))
	}
	return out
}

// clusterRouteList is the permission to list routes of group/resource in
// every namespace, with how to grant it (or do without the check).
func clusterRouteList(group, resource string) deploy.Perm {
	gr := resource + "." + group
	role := "epwindow-verify-" + resource
	return deploy.Perm{Verb: "list", Group: group, Resource: resource, Scope: deploy.ScopeCluster, Why: fmt.Sprintf(
		"needed at cluster scope (every namespace) by the route check, to find a more specific %[1]s in another namespace that would take --%[2]s's requests: "+
			"it could not be looked for, so the route is not checked. Grant it: "+
			"kubectl create clusterrole %[3]s --verb=list --resource=%[1]s && kubectl create clusterrolebinding %[3]s --clusterrole=%[3]s --user=USER (or --serviceaccount=NS:NAME); "+
			"or pass --%[4]s=false and check the route yourself",
		gr, FlagHost, role, FlagRouteCheck)}
}

// contenders are the matches the controller chooses among for the request,
// best first: those of own (the Deployment's namespace) with the best
// score, and every match of another namespace served by the same controller
// as one of them; a controller routes a host across namespaces (an exact
// host in one beats a wildcard or catch-all in another). Without a match in
// own, every other match (to name where a wrong route leads). own and
// others are sorted best first.
func contenders(own, others []backend) []backend {
	if len(own) == 0 {
		return others
	}
	var top []backend
	for _, b := range own {
		if b.score == own[0].score {
			top = append(top, b)
		}
	}
	out := slices.Clone(top)
	for _, b := range others {
		if slices.ContainsFunc(top, func(o backend) bool { return sameController(o, b) }) {
			out = append(out, b)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].score > out[j].score })
	return out
}

// routeBackends lists the matching backends of every Ingress and HTTPRoute
// in ns (all namespaces: metav1.NamespaceAll), best first, and which kinds
// could not be listed for want of a permission: HTTPRoutes anywhere,
// Ingresses in all namespaces (in ns they are a required permission).
// HTTPRoutes are read when Config.Dynamic is set and the Gateway API is
// installed.
func (r *runner) routeBackends(ctx context.Context, ns, host, path string) ([]backend, unreadable, error) {
	cfg := r.cfg
	var out []backend
	var unread unreadable
	ings, err := cfg.Client.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		for i := range ings.Items {
			out = append(out, ingressBackends(&ings.Items[i], host, path)...)
		}
	case apierrors.IsForbidden(err) && ns == metav1.NamespaceAll:
		unread.ingresses = true
	default:
		return nil, unread, fmt.Errorf("list ingresses in %q to check the route (or --%s=false): %w", ns, FlagRouteCheck, err)
	}
	if cfg.Dynamic != nil {
		routes, err := cfg.Dynamic.Resource(deploy.HTTPRouteResource).Namespace(ns).List(ctx, metav1.ListOptions{})
		switch {
		case err == nil:
			for i := range routes.Items {
				out = append(out, httpRouteBackends(&routes.Items[i], host, path)...)
			}
		case apierrors.IsNotFound(err):
			// No Gateway API here: Ingresses only.
		case apierrors.IsForbidden(err):
			unread.httproutes = true
		default:
			return nil, unread, fmt.Errorf("list httproutes in %q to check the route (or --%s=false): %w", ns, FlagRouteCheck, err)
		}
	}
	// Best first; stable, so equal scores keep the API's order.
	sort.SliceStable(out, func(i, j int) bool { return out[i].score > out[j].score })
	return out, unread, nil
}
