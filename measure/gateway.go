package measure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/epwindow/epwindow/deploy"
)

// Route kinds, the values of Config.Route (--route).
const (
	RouteIngress   = deploy.RouteIngress
	RouteHTTPRoute = deploy.RouteHTTPRoute
)

// GatewayRef names the Gateway an HTTPRoute run attaches to
// (Config.Gateway): namespace, name and, optionally, a listener's section
// name.
type GatewayRef = deploy.GatewayRef

// ClusterError is a cluster that cannot serve the run as asked, found
// before anything was created: no Gateway API CRDs, a Gateway whose class
// does not exist or that no controller accepted. The CLI exits 4 for it
// (the cluster is unusable), unlike a FlagError (2: change the flag).
type ClusterError struct{ Err error }

func (e *ClusterError) Error() string { return e.Err.Error() }
func (e *ClusterError) Unwrap() error { return e.Err }

// Gateway is the Gateway of an HTTPRoute run as CheckGateway found it.
type Gateway struct {
	Ref GatewayRef
	// Class is the Gateway's spec.gatewayClassName; Controller that
	// GatewayClass's spec.controllerName. Only the controller of that name
	// answers for the route on this Gateway (its entry in the HTTPRoute's
	// status.parents), so the run waits for that one and ignores others.
	Class      string
	Controller string
}

// String reads "Gateway gw/traefik (class traefik, controller traefik.io/gateway-controller)".
func (g Gateway) String() string {
	return fmt.Sprintf("Gateway %s (class %s, controller %s)", g.Ref, g.Class, g.Controller)
}

// CheckGateway reads the Gateway ref names and its GatewayClass before
// anything is created. A missing Gateway is bad input (*FlagError on
// --gateway, or --gateway-section for a listener it does not have); no
// Gateway API v1 in the cluster, a missing GatewayClass, or a Gateway no
// controller accepted is a *ClusterError: an HTTPRoute on it would never be
// programmed, and the run would only find out at --settle-timeout.
func CheckGateway(ctx context.Context, disc discovery.ServerResourcesInterface, dyn dynamic.Interface, ref GatewayRef) (Gateway, error) {
	g := Gateway{Ref: ref}
	gw, err := dyn.Resource(deploy.GatewayResource).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// The API server answers 404 for a missing object and for a
		// resource it does not serve alike; discovery tells them apart.
		if served, derr := gatewayAPIServed(ctx, disc); derr != nil {
			return g, fmt.Errorf("discover %s: %w", deploy.GatewayResource.GroupVersion(), derr)
		} else if !served {
			return g, &ClusterError{Err: fmt.Errorf("--%s %s: the Gateway API CRDs are not installed (the cluster serves no %s %s): install the standard channel of Gateway API v1.0 or later, with a controller that implements it",
				FlagGateway, ref.Namespace+"/"+ref.Name, deploy.GatewayResource.Resource, deploy.GatewayResource.GroupVersion())}
		}
		return g, &FlagError{Flag: FlagGateway, Value: ref.Namespace + "/" + ref.Name, Err: errors.New("Gateway not found")}
	}
	if err != nil {
		return g, fmt.Errorf("read Gateway %s/%s (--%s): %w", ref.Namespace, ref.Name, FlagGateway, err)
	}
	g.Class, _, _ = unstructured.NestedString(gw.Object, "spec", "gatewayClassName")
	if ref.Section != "" {
		if names := listenerNames(gw); !slices.Contains(names, ref.Section) {
			return g, &FlagError{Flag: FlagGatewaySection, Value: ref.Section,
				Err: fmt.Errorf("Gateway %s/%s has no listener of that name (it has: %s)", ref.Namespace, ref.Name, strings.Join(names, ", "))}
		}
	}

	class, err := dyn.Resource(deploy.GatewayClassResource).Get(ctx, g.Class, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return g, &ClusterError{Err: fmt.Errorf("Gateway %s/%s names GatewayClass %q, which does not exist: no controller has accepted the Gateway (is its controller installed and running?)",
			ref.Namespace, ref.Name, g.Class)}
	}
	if err != nil {
		return g, fmt.Errorf("read GatewayClass %s of Gateway %s/%s: %w", g.Class, ref.Namespace, ref.Name, err)
	}
	g.Controller, _, _ = unstructured.NestedString(class.Object, "spec", "controllerName")

	// The CRD defaults a new Gateway to Accepted=Unknown, reason Pending,
	// "Waiting for controller" (apis/v1/gateway_types.go); only the
	// controller sets True.
	if c, ok := condition(gw, "Accepted"); !ok || c.status != "True" {
		state := "no Accepted condition"
		if ok {
			state = "Accepted=" + c.String()
		}
		return g, &ClusterError{Err: fmt.Errorf("%s: no controller has accepted it (%s); is %s running?", g, state, g.Controller)}
	}
	return g, nil
}

// gatewayAPIServed reports whether the API server serves Gateways in the
// version measure uses.
func gatewayAPIServed(ctx context.Context, disc discovery.ServerResourcesInterface) (bool, error) {
	list, err := discovery.ToServerResourcesInterfaceWithContext(disc).ServerResourcesForGroupVersionWithContext(ctx, deploy.GatewayResource.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == deploy.GatewayResource.Resource {
			return true, nil
		}
	}
	return false, nil
}

// listenerNames lists a Gateway's spec.listeners[].name.
func listenerNames(gw *unstructured.Unstructured) []string {
	ls, _, _ := unstructured.NestedSlice(gw.Object, "spec", "listeners")
	var names []string
	for _, l := range ls {
		if m, ok := l.(map[string]any); ok {
			if n, ok := m["name"].(string); ok {
				names = append(names, n)
			}
		}
	}
	return names
}

// cond is one metav1.Condition of a Gateway API object's status, as the
// run reads it.
type cond struct {
	status, reason, message string
	observedGeneration      int64
}

// String reads "Accepted=False NotAllowedByListeners: <message>" without
// the type, which the caller names.
func (c cond) String() string {
	s := c.status
	if c.reason != "" {
		s += " " + c.reason
	}
	if c.message != "" {
		s += ": " + c.message
	}
	return s
}

// condition finds status.conditions[type=t] of obj.
func condition(obj *unstructured.Unstructured, t string) (cond, bool) {
	cs, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	return findCondition(cs, t)
}

// findCondition finds the condition of type t in a conditions list.
func findCondition(cs []any, t string) (cond, bool) {
	for _, c := range cs {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != t {
			continue
		}
		out := cond{}
		out.status, _ = m["status"].(string)
		out.reason, _ = m["reason"].(string)
		out.message, _ = m["message"].(string)
		out.observedGeneration, _ = m["observedGeneration"].(int64)
		return out, true
	}
	return cond{}, false
}

// why is the condition's reason and message, "NotAllowedByListeners: …",
// or the reason alone when the controller gave no message.
func (c cond) why() string {
	switch {
	case c.reason == "":
		return c.message
	case c.message == "":
		return c.reason
	}
	return c.reason + ": " + c.message
}
