package deploy

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Route kinds, the values of --route: what carries the load from the
// ingress to the probe Service.
const (
	// RouteIngress is a networking.k8s.io/v1 Ingress (deploy/base, the
	// overlays): the default.
	RouteIngress = "ingress"
	// RouteHTTPRoute is a Gateway API HTTPRoute attached to an existing
	// Gateway (deploy/httproute).
	RouteHTTPRoute = "httproute"
)

// Flags that choose the route; errors name them so a user knows what to
// change.
const (
	FlagRoute          = "route"
	FlagGateway        = "gateway"
	FlagGatewaySection = "gateway-section"
)

// GatewayGroup is the Gateway API's group. The HTTPRoute is created in its
// v1 (GA since Gateway API v1.0): no typed client for it is linked in, so
// measure uses the dynamic client with these resources.
const GatewayGroup = "gateway.networking.k8s.io"

// The Gateway API resources measure reads and writes.
var (
	HTTPRouteResource    = schema.GroupVersionResource{Group: GatewayGroup, Version: "v1", Resource: "httproutes"}
	GatewayResource      = schema.GroupVersionResource{Group: GatewayGroup, Version: "v1", Resource: "gateways"}
	GatewayClassResource = schema.GroupVersionResource{Group: GatewayGroup, Version: "v1", Resource: "gatewayclasses"}
)

// GatewayRef names the Gateway an HTTPRoute attaches to: --gateway NS/NAME
// and, when given, --gateway-section (one listener of it).
type GatewayRef struct {
	Namespace string
	Name      string
	// Section is the parentRef's sectionName: a listener's name; "" attaches
	// to every listener that admits the route.
	Section string
}

// IsZero reports whether no Gateway is named.
func (g GatewayRef) IsZero() bool { return g == GatewayRef{} }

// String reads NS/NAME, or NS/NAME/SECTION with a section.
func (g GatewayRef) String() string {
	s := g.Namespace + "/" + g.Name
	if g.Section != "" {
		s += "/" + g.Section
	}
	return s
}

// ParseGatewayRef reads --gateway NS/NAME and --gateway-section. A Gateway
// is always named with its namespace: a run's own namespace is generated, so
// no Gateway can be in it, and guessing the context's would attach the
// route to whatever Gateway happens to share the name.
func ParseGatewayRef(gateway, section string) (GatewayRef, error) {
	if gateway == "" {
		return GatewayRef{Section: section}, nil
	}
	ns, name, ok := strings.Cut(gateway, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return GatewayRef{}, fmt.Errorf("--%s %q: want NAMESPACE/NAME of the Gateway, e.g. --%s traefik/traefik-gateway", FlagGateway, gateway, FlagGateway)
	}
	g := GatewayRef{Namespace: ns, Name: name, Section: section}
	return g, g.validate()
}

// validate checks the names as the API server would, so a typo fails
// before anything is created.
func (g GatewayRef) validate() error {
	if errs := validation.IsDNS1123Label(g.Namespace); len(errs) > 0 {
		return fmt.Errorf("--%s %s: namespace %q: %s", FlagGateway, g, g.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(g.Name); len(errs) > 0 {
		return fmt.Errorf("--%s %s: name %q: %s", FlagGateway, g, g.Name, strings.Join(errs, "; "))
	}
	// sectionName is a DNS-1123 subdomain in the Gateway API's CRD schema
	// (apis/v1/shared_types.go, SectionName).
	if g.Section != "" {
		if errs := validation.IsDNS1123Subdomain(g.Section); len(errs) > 0 {
			return fmt.Errorf("--%s %q: %s", FlagGatewaySection, g.Section, strings.Join(errs, "; "))
		}
	}
	return nil
}

// ValidateRoute checks --route and the flags that go with it: an HTTPRoute
// needs a Gateway, and the Ingress-only flags (--ingress-class, --overlay)
// would be silently ignored with it, so they are refused; a Gateway given
// with an Ingress is refused for the same reason. route "" is RouteIngress.
func ValidateRoute(route string, gw GatewayRef, ingressClass, overlay string) error {
	var errs []error
	switch route {
	case "", RouteIngress:
		if gw.Namespace != "" || gw.Name != "" {
			errs = append(errs, fmt.Errorf("--%s %s applies to --%s %s only", FlagGateway, gw.Namespace+"/"+gw.Name, FlagRoute, RouteHTTPRoute))
		}
		if gw.Section != "" {
			errs = append(errs, fmt.Errorf("--%s %s applies to --%s %s only", FlagGatewaySection, gw.Section, FlagRoute, RouteHTTPRoute))
		}
	case RouteHTTPRoute:
		if gw.Namespace == "" || gw.Name == "" {
			errs = append(errs, fmt.Errorf("--%s NAMESPACE/NAME is required with --%s %s: the Gateway the HTTPRoute attaches to", FlagGateway, FlagRoute, RouteHTTPRoute))
		} else if err := gw.validate(); err != nil {
			errs = append(errs, err)
		}
		// The Gateway's listeners and class decide where the route goes.
		if ingressClass != "" {
			errs = append(errs, fmt.Errorf("--ingress-class %s applies to --%s %s only: with an HTTPRoute the Gateway (--%s) picks the controller", ingressClass, FlagRoute, RouteIngress, FlagGateway))
		}
		if overlay != "" {
			errs = append(errs, fmt.Errorf("--overlay %s applies to --%s %s only: the overlays are ingress controllers' (deploy/overlays); an HTTPRoute is built from deploy/httproute", overlay, FlagRoute, RouteIngress))
		}
	default:
		errs = append(errs, fmt.Errorf("--%s %q: want %s or %s", FlagRoute, route, RouteIngress, RouteHTTPRoute))
	}
	return errors.Join(errs...)
}

// applyHTTPRoute sets the run's values on the HTTPRoute of deploy/httproute:
// names and labels as on the other objects, the one parent (the Gateway),
// the hostname, and every backendRef's Service name and port. The rules'
// matches are the manifest's (PathPrefix "/").
func (p Params) applyHTTPRoute(u *unstructured.Unstructured) error {
	u.SetName(p.Name)
	u.SetNamespace(p.Namespace)
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	p.label(labels, true)
	u.SetLabels(labels)

	parent := map[string]any{"group": GatewayGroup, "kind": "Gateway", "namespace": p.Gateway.Namespace, "name": p.Gateway.Name}
	if p.Gateway.Section != "" {
		parent["sectionName"] = p.Gateway.Section
	}
	if err := unstructured.SetNestedSlice(u.Object, []any{parent}, "spec", "parentRefs"); err != nil {
		return fmt.Errorf("httproute: %w", err)
	}
	// No hostnames matches any host, like an Ingress rule without one.
	if p.Host == "" {
		unstructured.RemoveNestedField(u.Object, "spec", "hostnames")
	} else if err := unstructured.SetNestedStringSlice(u.Object, []string{p.Host}, "spec", "hostnames"); err != nil {
		return fmt.Errorf("httproute: %w", err)
	}

	rules, _, err := unstructured.NestedSlice(u.Object, "spec", "rules")
	if err != nil {
		return fmt.Errorf("httproute: spec.rules: %w", err)
	}
	backends := 0
	for i, r := range rules {
		rule, ok := r.(map[string]any)
		if !ok {
			return fmt.Errorf("httproute: spec.rules[%d] is not an object", i)
		}
		refs, _, err := unstructured.NestedSlice(rule, "backendRefs")
		if err != nil {
			return fmt.Errorf("httproute: spec.rules[%d].backendRefs: %w", i, err)
		}
		for j, b := range refs {
			ref, ok := b.(map[string]any)
			if !ok {
				return fmt.Errorf("httproute: spec.rules[%d].backendRefs[%d] is not an object", i, j)
			}
			// A backendRef without group and kind is a core Service.
			if g, k := ref["group"], ref["kind"]; (g != nil && g != "") || (k != nil && k != "Service") {
				return fmt.Errorf("httproute: spec.rules[%d].backendRefs[%d] is a %v/%v, want the probe Service", i, j, g, k)
			}
			ref["name"], ref["port"] = p.Name, int64(p.port())
			backends++
		}
		rule["backendRefs"] = refs
	}
	if backends == 0 {
		return fmt.Errorf("httproute: no backendRef: the route must send to the probe Service")
	}
	return unstructured.SetNestedSlice(u.Object, rules, "spec", "rules")
}
