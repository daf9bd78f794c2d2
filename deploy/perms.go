package deploy

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Scope says where a permission is checked.
type Scope string

const (
	// ScopeCluster is a cluster-scoped resource (namespaces, ingressclasses).
	ScopeCluster Scope = "cluster"
	// ScopeRun is a namespaced resource in the run's namespace.
	ScopeRun Scope = "run"
	// ScopeFixed is a namespaced resource in Perm.Namespace (an ingress
	// controller's namespace, for an observer; the Gateway's, for
	// --route httproute).
	ScopeFixed Scope = "fixed"
)

// Perm is one verb on one resource that `epwindow measure` uses. The lists
// here and the rules under deploy/rbac/ are the same (a test holds them
// together).
type Perm struct {
	Verb        string
	Group       string // "" is the core group
	Resource    string
	Subresource string
	Scope       Scope
	// Namespace is where a ScopeFixed permission applies.
	Namespace string
	// Why measure needs it, for the error message.
	Why string
}

// String reads like kubectl auth can-i: "create pods/proxy -n ns".
func (p Perm) String() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	switch p.Scope {
	case ScopeFixed:
		return fmt.Sprintf("%s %s -n %s", p.Verb, r, p.Namespace)
	case ScopeCluster:
		return fmt.Sprintf("%s %s", p.Verb, r)
	}
	return fmt.Sprintf("%s %s (in the run's namespace)", p.Verb, r)
}

func perms(scope Scope, group, resource, sub, why string, verbs ...string) []Perm {
	out := make([]Perm, 0, len(verbs))
	for _, v := range verbs {
		out = append(out, Perm{Verb: v, Group: group, Resource: resource, Subresource: sub, Scope: scope, Why: why})
	}
	return out
}

// RequiredPermissions lists what `epwindow measure` needs through an
// Ingress (the default --route), verb by verb: PermissionsFor(createNamespace,
// RouteIngress, GatewayRef{}).
func RequiredPermissions(createNamespace bool) []Perm {
	return PermissionsFor(createNamespace, RouteIngress, GatewayRef{})
}

// PermissionsFor lists what `epwindow measure` needs with route, verb by
// verb. With createNamespace it creates and deletes its own namespace (rules
// in deploy/rbac/cluster); without, it runs in an existing one
// (deploy/rbac/namespaced). The RBAC variants grant what both routes need;
// a run is checked only for its own, so an HTTPRoute run does not ask for
// Ingress rights, nor an Ingress run for Gateway API ones. gw is the
// Gateway an HTTPRoute attaches to: reading it is checked in its namespace.
func PermissionsFor(createNamespace bool, route string, gw GatewayRef) []Perm {
	var out []Perm
	if createNamespace {
		out = append(out, perms(ScopeCluster, "", "namespaces", "", "the run's own namespace: created, deleted at exit, read while it goes", "create", "get", "delete")...)
	}
	// In its own namespace, deleting the namespace removes the Service and
	// the Ingress; in an existing one measure deletes them itself.
	cleanup := []string{}
	if !createNamespace {
		cleanup = append(cleanup, "delete")
	}
	groups := [][]Perm{
		perms(ScopeRun, "apps", "deployments", "", "the probe Deployment: created, read, restarted (--mode rollout), deleted first at exit", "create", "get", "patch", "delete"),
		perms(ScopeRun, "", "services", "", "the probe Service", append([]string{"create"}, cleanup...)...),
	}
	if route == RouteHTTPRoute {
		groups = append(groups,
			perms(ScopeRun, GatewayGroup, "httproutes", "", "the probe HTTPRoute: created, read until its Gateway's controller accepts it", append([]string{"create", "get"}, cleanup...)...),
			in(gw.Namespace, perms(ScopeFixed, GatewayGroup, "gateways", "", "--gateway is read before anything is created: its class, and whether a controller accepted it", "get")),
			perms(ScopeCluster, GatewayGroup, "gatewayclasses", "", "the Gateway's class names the controller whose answer the run waits for", "get"))
	} else {
		groups = append(groups,
			perms(ScopeRun, "networking.k8s.io", "ingresses", "", "the probe Ingress: created, read by --observer auto", append([]string{"create", "get"}, cleanup...)...))
	}
	groups = append(groups,
		perms(ScopeRun, "", "pods", "", "the probe pods: watched, one deleted per trial", "get", "list", "watch", "delete"),
		perms(ScopeRun, "", "pods", "proxy", "the probe's /timeline, /clock (GET) and /release (POST) through the pod proxy", "get", "create"),
		perms(ScopeRun, "discovery.k8s.io", "endpointslices", "", "the Service's EndpointSlices, watched", "list", "watch"))
	if route != RouteHTTPRoute {
		groups = append(groups, perms(ScopeCluster, "networking.k8s.io", "ingressclasses", "", "--ingress-class is checked before anything is created", "get", "list"))
	}
	groups = append(groups, perms(ScopeCluster, "authorization.k8s.io", "selfsubjectaccessreviews", "", "this permission check", "create"))
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// TargetPermissions lists what `epwindow measure --target deployment/NAME`
// needs with route, verb by verb (deploy/rbac/target). Run-scoped ones are
// in the Deployment's namespace, where it creates and deletes nothing: it
// patches the Deployment's template (the sidecar, in and out) and evicts
// one pod at a time. As in PermissionsFor, an HTTPRoute run is checked for
// the Gateway API reads, an Ingress run for the Ingress ones.
func TargetPermissions(route string, gw GatewayRef) []Perm {
	groups := [][]Perm{
		perms(ScopeRun, "apps", "deployments", "", "the target Deployment: read, the sidecar patched in and out of its template, its rollouts followed", "get", "patch"),
		perms(ScopeRun, "", "pods", "", "the Deployment's pods: watched (deletion and removal stamped), the sidecar's state read", "get", "list", "watch"),
		perms(ScopeRun, "", "pods", "eviction", "one pod removed per trial through the Eviction API, so that PodDisruptionBudgets hold", "create"),
		perms(ScopeRun, "", "pods", "proxy", "the sidecar's /timeline and /clock (GET) through the pod proxy", "get"),
		perms(ScopeRun, "", "services", "", "the Services that select the Deployment's pods", "list"),
		perms(ScopeRun, "discovery.k8s.io", "endpointslices", "", "those Services' EndpointSlices, watched", "list", "watch"),
	}
	if route == RouteHTTPRoute {
		groups = append(groups,
			perms(ScopeRun, GatewayGroup, "httproutes", "", "the HTTPRoutes that route to those Services", "list"),
			in(gw.Namespace, perms(ScopeFixed, GatewayGroup, "gateways", "", "the HTTPRoute's Gateway: its class names the controller to observe", "get")),
			perms(ScopeCluster, GatewayGroup, "gatewayclasses", "", "the Gateway's class names the controller whose answer the run waits for", "get"))
	} else {
		groups = append(groups,
			perms(ScopeRun, "networking.k8s.io", "ingresses", "", "the Ingresses that route to those Services", "list"))
	}
	groups = append(groups,
		perms(ScopeRun, "policy", "poddisruptionbudgets", "", "a refused eviction names the PodDisruptionBudget that holds it", "list"))
	if route != RouteHTTPRoute {
		groups = append(groups, perms(ScopeCluster, "networking.k8s.io", "ingressclasses", "", "the Ingress's class (or the default one) names the controller to observe", "get", "list"))
	}
	groups = append(groups, perms(ScopeCluster, "authorization.k8s.io", "selfsubjectaccessreviews", "", "this permission check", "create"))
	var out []Perm
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// ObserverPermissions lists what an observer that reads the controller's
// pods (nginx, traefik, envoy, and skipper without --observer-url) needs in
// the controller's namespace ns (deploy/rbac/observer).
func ObserverPermissions(ns string) []Perm {
	return in(ns, append(
		perms(ScopeFixed, "", "pods", "", "find the ingress controller's replicas", "list"),
		perms(ScopeFixed, "", "pods", "portforward", "read each replica's own upstream list through a port-forward", "create")...))
}

// in sets the namespace of ScopeFixed permissions ps.
func in(ns string, ps []Perm) []Perm {
	for i := range ps {
		ps[i].Namespace = ns
	}
	return ps
}

// MissingPermissions checks RequiredPermissions(true) with one
// SelfSubjectAccessReview each; run-scoped ones are checked in namespace ns
// (the name measure is about to create; "" means every namespace). It
// returns the denied ones, in order.
func MissingPermissions(ctx context.Context, authz authorizationv1client.SelfSubjectAccessReviewsGetter, ns string) ([]Perm, error) {
	return Check(ctx, authz, ns, RequiredPermissions(true))
}

// Check asks the API server, one SelfSubjectAccessReview per permission,
// whether the caller holds each of ps, and returns the denied ones. ns is
// the run's namespace for ScopeRun permissions.
func Check(ctx context.Context, authz authorizationv1client.SelfSubjectAccessReviewsGetter, ns string, ps []Perm) ([]Perm, error) {
	var missing []Perm
	for _, p := range ps {
		attrs := &authorizationv1.ResourceAttributes{
			Verb:        p.Verb,
			Group:       p.Group,
			Resource:    p.Resource,
			Subresource: p.Subresource,
		}
		switch p.Scope {
		case ScopeRun:
			attrs.Namespace = ns
		case ScopeFixed:
			attrs.Namespace = p.Namespace
		}
		review := &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs},
		}
		got, err := authz.SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("check permission %q (SelfSubjectAccessReview): %w", p, err)
		}
		if !got.Status.Allowed || got.Status.Denied {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// MissingError is returned when permissions are missing; its message names
// each verb/resource and the manifest that grants them.
type MissingError struct {
	Missing []Perm
	// Manifest is where the rules are, e.g. "deploy/rbac/cluster".
	Manifest string
	// Namespace, when set, is the existing namespace the run-scoped
	// permissions were checked in (measure --namespace).
	Namespace string
}

// Error lists the missing permissions, one per line.
func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "missing %d permission(s); nothing was created:\n", len(e.Missing))
	for _, p := range e.Missing {
		if p.Scope == ScopeRun && e.Namespace != "" {
			p.Scope, p.Namespace = ScopeFixed, e.Namespace
		}
		fmt.Fprintf(&b, "  %s: %s\n", p, p.Why)
	}
	fmt.Fprintf(&b, "grant them with %s (`epwindow manifests --rbac` prints it; edit the subject, then kubectl apply -f -)", e.Manifest)
	return b.String()
}
