package measure

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/epwindow/epwindow/deploy"
)

// routePoll is how often waitRoute reads the HTTPRoute. The wait happens
// once, before the first trial, so its latency is in no measured stage, and
// polling with get needs no list/watch permission on HTTPRoutes.
const routePoll = 250 * time.Millisecond

// waitRoute waits, with an HTTPRoute, until the Gateway's controller has
// accepted it and resolved its backend (routeStatus); it returns at once
// when the controller refuses either, with the controller's reason, and
// after --settle-timeout naming the controller that did not answer. An
// Ingress has no such status to wait for: waitSteady's load through it is
// the test.
func (r *runner) waitRoute(ctx context.Context) error {
	if r.wl.HTTPRoute == nil {
		return nil
	}
	name := r.wl.HTTPRoute.GetName()
	routes := r.dynamic.Resource(deploy.HTTPRouteResource).Namespace(r.ns)
	deadline := r.cfg.Clock.NewTimer(r.cfg.SettleTimeout)
	defer deadline.Stop()
	tick := r.cfg.Clock.NewTicker(routePoll)
	defer tick.Stop()
	for {
		var why string
		u, err := routes.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsForbidden(err), apierrors.IsNotFound(err):
			// Not a blip to wait out: a permission missing (the
			// preflight checked get) or the route deleted under the run.
			return fmt.Errorf("read HTTPRoute %s/%s: %w", r.ns, name, err)
		case err != nil:
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			why = fmt.Sprintf("read HTTPRoute %s/%s: %v", r.ns, name, err)
		default:
			accepted, w, err := routeStatus(u, r.gateway)
			if err != nil {
				return err
			}
			if accepted {
				r.report(Progress{Phase: "steady", Message: fmt.Sprintf("HTTPRoute %s/%s accepted by %s", r.ns, name, r.gateway)})
				return nil
			}
			why = w
		}
		r.report(Progress{Phase: "steady", Message: why})
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline.C():
			return fmt.Errorf("HTTPRoute %s/%s: controller %s did not accept it on Gateway %s within %s (--%s): %s; is %s running?",
				r.ns, name, r.gateway.Controller, r.gateway.Ref, r.cfg.SettleTimeout, FlagSettle, why, r.gateway.Controller)
		case <-tick.C():
		}
	}
}

// routeStatus reads route's status.parents entry of gw, the one whose
// parentRef names gw's Gateway (namespace defaulting to the route's, and
// the same sectionName) and whose controllerName is gw's class's: other
// controllers may report on the same route for their own Gateways, and
// their answers say nothing about gw. accepted is true once that entry has
// Accepted=True and ResolvedRefs=True for the route's current generation;
// err is set when the controller says False to either (it will not route
// until the route changes, so waiting is pointless); otherwise why says
// what is missing.
func routeStatus(route *unstructured.Unstructured, gw Gateway) (accepted bool, why string, err error) {
	id := route.GetNamespace() + "/" + route.GetName()
	parents, _, _ := unstructured.NestedSlice(route.Object, "status", "parents")
	var conds []any
	found := false
	for _, p := range parents {
		m, ok := p.(map[string]any)
		if !ok || m["controllerName"] != gw.Controller {
			continue
		}
		ref, _ := m["parentRef"].(map[string]any)
		if !parentIs(ref, route.GetNamespace(), gw.Ref) {
			continue
		}
		conds, _ = m["conditions"].([]any)
		found = true
		break
	}
	if !found {
		return false, fmt.Sprintf("HTTPRoute %s: waiting for controller %s to answer for Gateway %s", id, gw.Controller, gw.Ref), nil
	}
	acc, accOK := findCondition(conds, "Accepted")
	res, resOK := findCondition(conds, "ResolvedRefs")
	gen := route.GetGeneration()
	// A condition of an older generation is about a spec the route no
	// longer has; observedGeneration is optional, 0 when left out.
	stale := func(c cond) bool { return c.observedGeneration != 0 && c.observedGeneration < gen }
	if accOK && !stale(acc) && acc.status == "False" {
		return false, "", fmt.Errorf("HTTPRoute %s not accepted by Gateway %s (controller %s): %s", id, gw.Ref, gw.Controller, acc.why())
	}
	if resOK && !stale(res) && res.status == "False" {
		return false, "", fmt.Errorf("HTTPRoute %s on Gateway %s (controller %s): its backend refs are not resolved: %s", id, gw.Ref, gw.Controller, res.why())
	}
	for _, c := range []struct {
		name string
		c    cond
		ok   bool
	}{{"Accepted", acc, accOK}, {"ResolvedRefs", res, resOK}} {
		switch {
		case !c.ok:
			return false, fmt.Sprintf("HTTPRoute %s: controller %s has not yet set %s for Gateway %s", id, gw.Controller, c.name, gw.Ref), nil
		case stale(c.c):
			return false, fmt.Sprintf("HTTPRoute %s: controller %s's %s is of generation %d, the route is at %d", id, gw.Controller, c.name, c.c.observedGeneration, gen), nil
		case c.c.status != "True":
			return false, fmt.Sprintf("HTTPRoute %s on Gateway %s: %s=%s (controller %s)", id, gw.Ref, c.name, c.c, gw.Controller), nil
		}
	}
	return true, "", nil
}

// parentIs reports whether a status entry's parentRef names the Gateway
// ref, with the Gateway API's defaults: group gateway.networking.k8s.io,
// kind Gateway, the route's namespace (apis/v1/shared_types.go,
// ParentReference).
func parentIs(ref map[string]any, routeNS string, gw GatewayRef) bool {
	if ref == nil {
		return false
	}
	str := func(k, def string) string {
		v, ok := ref[k].(string)
		if !ok {
			return def
		}
		return v
	}
	return str("group", deploy.GatewayGroup) == deploy.GatewayGroup && str("kind", "Gateway") == "Gateway" &&
		str("namespace", routeNS) == gw.Namespace && str("name", "") == gw.Name && str("sectionName", "") == gw.Section
}
