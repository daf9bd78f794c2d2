package verify

import (
	"context"
	"fmt"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/epwindow/epwindow/deploy"
)

// Permissions lists what verify needs with cfg, verb by verb: on the team's
// namespace (ScopeFixed, cfg.Namespace) and, for the self-test, in the
// namespace it creates (ScopeRun). The route check also reads HTTPRoutes
// in the namespace when allowed, and Ingresses and HTTPRoutes in every
// namespace to find a more specific route there and to name where a wrong
// --host leads: not listed here, since which kind it needs is known only
// from the route found (HTTPRoutes may not even be installed); checkRoute
// names the one it lacks (unreadContenders).
func Permissions(cfg Config) []deploy.Perm {
	fixed := func(group, resource, sub, why string, verbs ...string) []deploy.Perm {
		var out []deploy.Perm
		for _, v := range verbs {
			out = append(out, deploy.Perm{Verb: v, Group: group, Resource: resource, Subresource: sub, Scope: deploy.ScopeFixed, Namespace: cfg.Namespace, Why: why})
		}
		return out
	}
	scoped := func(scope deploy.Scope, group, resource, why string, verbs ...string) []deploy.Perm {
		var out []deploy.Perm
		for _, v := range verbs {
			out = append(out, deploy.Perm{Verb: v, Group: group, Resource: resource, Scope: scope, Why: why})
		}
		return out
	}
	var ps []deploy.Perm
	ps = append(ps, fixed("apps", "deployments", "", "the Deployment: read, and followed through its rollouts", "get")...)
	if cfg.Watch {
		ps = append(ps, fixed("apps", "replicasets", "", "--watch: the new template's ReplicaSet, whose pods are not replaced ones", "list")...)
	} else {
		ps = append(ps, fixed("apps", "deployments", "", "the restart annotation (kubectl rollout restart), the only change verify makes", "patch")...)
	}
	ps = append(ps, fixed("", "pods", "", "the Deployment's pods: deletions, readiness and exit codes", "list", "watch")...)
	ps = append(ps, fixed("discovery.k8s.io", "endpointslices", "", "when a terminating pod's address leaves the EndpointSlices", "list", "watch")...)
	if !cfg.NoRouteCheck {
		ps = append(ps, fixed("networking.k8s.io", "ingresses", "", "the route check: the Ingress that routes --host/--path (or --route-check=false)", "list")...)
		ps = append(ps, fixed("", "services", "", "the route check: the Service the route sends to must select the Deployment's pods", "get")...)
	}
	var proxied []string
	if cfg.CheckPort != nil {
		proxied = append(proxied, "--check-port reads each pod's port")
	}
	if cfg.Sidecar {
		proxied = append(proxied, "--sidecar reads each pod's epwindow sidecar")
	}
	if len(proxied) > 0 {
		ps = append(ps, fixed("", "pods", "proxy", strings.Join(proxied, ", ")+" through the pod proxy", "get")...)
	}
	if cfg.SelfTest {
		if cfg.IngressClass == "" {
			ps = append(ps, fixed("", "services", "", "find the Ingress that routes to the Deployment (its class is the canary's; or pass --ingress-class)", "list")...)
			if cfg.NoRouteCheck {
				ps = append(ps, fixed("networking.k8s.io", "ingresses", "", "find the Ingress that routes to the Deployment", "list")...)
			}
			ps = append(ps, scoped(deploy.ScopeCluster, "networking.k8s.io", "ingressclasses", "the default IngressClass, when no Ingress names one", "list")...)
		}
		ps = append(ps, scoped(deploy.ScopeCluster, "", "namespaces", "the self-test's own namespace: created, deleted at exit", "create", "get", "delete")...)
		ps = append(ps, scoped(deploy.ScopeRun, "apps", "deployments", "the canary Deployment: created, restarted", "create", "get", "patch")...)
		ps = append(ps, scoped(deploy.ScopeRun, "", "services", "the canary Service", "create")...)
		ps = append(ps, scoped(deploy.ScopeRun, "networking.k8s.io", "ingresses", "the canary Ingress", "create")...)
		ps = append(ps, scoped(deploy.ScopeRun, "", "pods", "the canary pods", "list", "watch")...)
		ps = append(ps, scoped(deploy.ScopeRun, "discovery.k8s.io", "endpointslices", "the canary's EndpointSlices", "list", "watch")...)
	}
	return append(ps, scoped(deploy.ScopeCluster, "authorization.k8s.io", "selfsubjectaccessreviews", "this permission check", "create")...)
}

// Preflight checks every permission verify needs before it touches
// anything; selfTestNS is the namespace the self-test would create. A
// missing one is a *deploy.MissingError naming them all.
func Preflight(ctx context.Context, cfg Config, selfTestNS string) error {
	missing, err := deploy.Check(ctx, cfg.Client.AuthorizationV1(), selfTestNS, Permissions(cfg))
	if err != nil {
		return fmt.Errorf("check permissions: %w", err)
	}
	if len(missing) > 0 {
		return &MissingError{Missing: missing}
	}
	return nil
}

// MissingError names every permission verify lacks; nothing was changed.
type MissingError struct{ Missing []deploy.Perm }

func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "missing %d permission(s); nothing was changed:", len(e.Missing))
	for _, p := range e.Missing {
		fmt.Fprintf(&b, "\n  %s: %s", p, p.Why)
	}
	return b.String()
}

// ingressServices lists the Service names an Ingress routes to.
func ingressServices(spec networkingv1.IngressSpec) []string {
	var out []string
	if b := spec.DefaultBackend; b != nil && b.Service != nil {
		out = append(out, b.Service.Name)
	}
	for _, rule := range spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			if p.Backend.Service != nil {
				out = append(out, p.Backend.Service.Name)
			}
		}
	}
	return out
}
