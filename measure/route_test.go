package measure

import (
	"context"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/epwindow/epwindow/deploy"
)

const traefikGateway = "traefik.io/gateway-controller"

// traefikGW is Gateway gw/traefik as CheckGateway reports it.
var traefikGW = Gateway{Ref: GatewayRef{Namespace: "gw", Name: "traefik"}, Class: "traefik", Controller: traefikGateway}

// parentStatus is one status.parents entry: controller's answer for the
// parent ref.
func parentStatus(controller string, ref map[string]any, conds ...map[string]any) map[string]any {
	cs := make([]any, len(conds))
	for i, c := range conds {
		cs[i] = c
	}
	return map[string]any{"controllerName": controller, "parentRef": ref, "conditions": cs}
}

// gwRef is the parentRef the run writes for gw/traefik.
func gwRef() map[string]any {
	return map[string]any{"group": deploy.GatewayGroup, "kind": "Gateway", "namespace": "gw", "name": "traefik"}
}

// routeObj is HTTPRoute ns/probe at generation gen with the given parents'
// status.
func routeObj(ns string, gen int64, parents ...map[string]any) *unstructured.Unstructured {
	ps := make([]any, len(parents))
	for i, p := range parents {
		ps[i] = p
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"namespace": ns, "name": "probe", "generation": gen},
		"status":   map[string]any{"parents": ps},
	}}
}

func TestRouteStatus(t *testing.T) {
	accepted, resolved := condObj("Accepted", "True", "Accepted", "", 1), condObj("ResolvedRefs", "True", "ResolvedRefs", "", 1)
	notAllowed := condObj("Accepted", "False", "NotAllowedByListeners", "no listener allows routes from namespace epw", 1)
	noBackend := condObj("ResolvedRefs", "False", "BackendNotFound", "service epw/probe not found", 1)
	section := gwRef()
	section["sectionName"] = "websecure"
	sameNS := gwRef()
	delete(sameNS, "namespace")
	tests := []struct {
		name  string
		route *unstructured.Unstructured
		gw    Gateway
		ok    bool
		why   string // pending: in why
		err   string // refused: the error
	}{
		{"accepted", routeObj("epw", 1, parentStatus(traefikGateway, gwRef(), accepted, resolved)), traefikGW, true, "", ""},
		{"no status yet", routeObj("epw", 1), traefikGW, false,
			"HTTPRoute epw/probe: waiting for controller traefik.io/gateway-controller to answer for Gateway gw/traefik", ""},
		{"not accepted", routeObj("epw", 1, parentStatus(traefikGateway, gwRef(), notAllowed, resolved)), traefikGW, false, "",
			"HTTPRoute epw/probe not accepted by Gateway gw/traefik (controller traefik.io/gateway-controller): NotAllowedByListeners: no listener allows routes from namespace epw"},
		// Traefik refuses with a reason and no message.
		{"not accepted, no message", routeObj("epw", 1, parentStatus(traefikGateway, gwRef(),
			condObj("Accepted", "False", "NotAllowedByListeners", "", 1), resolved)), traefikGW, false, "",
			"HTTPRoute epw/probe not accepted by Gateway gw/traefik (controller traefik.io/gateway-controller): NotAllowedByListeners"},
		{"backend not resolved", routeObj("epw", 1, parentStatus(traefikGateway, gwRef(), accepted, noBackend)), traefikGW, false, "",
			"HTTPRoute epw/probe on Gateway gw/traefik (controller traefik.io/gateway-controller): its backend refs are not resolved: BackendNotFound: service epw/probe not found"},
		// Another implementation refusing the route for its own Gateway of
		// the same name says nothing about ours.
		{"another controller refuses", routeObj("epw", 1,
			parentStatus("example.com/other", gwRef(), notAllowed, noBackend),
			parentStatus(traefikGateway, gwRef(), accepted, resolved)), traefikGW, true, "", ""},
		{"only another controller answered", routeObj("epw", 1, parentStatus("example.com/other", gwRef(), accepted, resolved)), traefikGW, false,
			"waiting for controller traefik.io/gateway-controller", ""},
		{"another listener's entry", routeObj("epw", 1, parentStatus(traefikGateway, section, notAllowed, resolved)), traefikGW, false,
			"waiting for controller", ""},
		{"the listener named", routeObj("epw", 1, parentStatus(traefikGateway, section, accepted, resolved)),
			Gateway{Ref: GatewayRef{Namespace: "gw", Name: "traefik", Section: "websecure"}, Controller: traefikGateway}, true, "", ""},
		{"namespace defaults to the route's", routeObj("gw", 1, parentStatus(traefikGateway, sameNS, accepted, resolved)), traefikGW, true, "", ""},
		{"a route elsewhere with the default namespace", routeObj("epw", 1, parentStatus(traefikGateway, sameNS, accepted, resolved)), traefikGW, false,
			"waiting for controller", ""},
		// Conditions about an older spec are not the answer yet, a refusal
		// included.
		{"stale acceptance", routeObj("epw", 2, parentStatus(traefikGateway, gwRef(), accepted, resolved)), traefikGW, false,
			"Accepted is of generation 1, the route is at 2", ""},
		{"stale refusal", routeObj("epw", 2, parentStatus(traefikGateway, gwRef(), notAllowed, resolved)), traefikGW, false,
			"of generation 1", ""},
		{"refs pending", routeObj("epw", 1, parentStatus(traefikGateway, gwRef(), accepted,
			condObj("ResolvedRefs", "Unknown", "Pending", "resolving", 1))), traefikGW, false,
			"HTTPRoute epw/probe on Gateway gw/traefik: ResolvedRefs=Unknown Pending: resolving (controller traefik.io/gateway-controller)", ""},
		{"refs not set", routeObj("epw", 1, parentStatus(traefikGateway, gwRef(), accepted)), traefikGW, false,
			"has not yet set ResolvedRefs", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why, err := routeStatus(tt.route, tt.gw)
			if ok != tt.ok {
				t.Errorf("accepted = %v, want %v (why %q, err %v)", ok, tt.ok, why, err)
			}
			switch {
			case tt.err != "":
				if err == nil || err.Error() != tt.err {
					t.Errorf("err = %v, want %q", err, tt.err)
				}
			case err != nil:
				t.Errorf("err = %v, want none", err)
			}
			if !strings.Contains(why, tt.why) || (tt.why == "" && why != "") {
				t.Errorf("why = %q, want it to contain %q", why, tt.why)
			}
		})
	}
}

// routeRunner is a runner that rendered an HTTPRoute run in namespace epw
// on Gateway gw/traefik, with route (if any) in a fake dynamic client and a
// fake clock; progress messages are kept.
func routeRunner(t *testing.T, route *unstructured.Unstructured) (*runner, *dynamicfake.FakeDynamicClient, *clocktesting.FakeClock, func() []string) {
	t.Helper()
	wl, err := deploy.Render(deploy.Params{Namespace: "epw", Name: "probe", Replicas: 2, Image: deploy.DefaultImage,
		Hold: time.Minute, RunID: "abc123", Route: deploy.RouteHTTPRoute, Gateway: traefikGW.Ref})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	if route != nil {
		objs = append(objs, route)
	}
	dyn := gatewayAPI(t, objs...)
	clk := clocktesting.NewFakeClock(t0)
	var mu sync.Mutex
	var msgs []string
	r := &runner{cfg: Config{Trials: 1, Clock: clk, SettleTimeout: time.Minute}, ns: "epw", runID: "abc123", wl: wl,
		dynamic: dyn, gateway: traefikGW, progress: func(p Progress) {
			mu.Lock()
			defer mu.Unlock()
			msgs = append(msgs, p.Message)
		}}
	return r, dyn, clk, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs...)
	}
}

// runWaitRoute runs r.waitRoute; each time it waits on the clock, step
// (when set) runs and the clock advances by by.
func runWaitRoute(t *testing.T, r *runner, clk *clocktesting.FakeClock, by time.Duration, step func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.waitRoute(context.Background()) }()
	guard := time.After(20 * time.Second)
	for {
		select {
		case err := <-done:
			return err
		case <-guard:
			t.Fatal("waitRoute still waiting")
		default:
		}
		if clk.HasWaiters() {
			if step != nil {
				step()
				step = nil
			}
			clk.Step(by)
		}
		goruntime.Gosched()
	}
}

// The run waits while the controller has not answered, saying so, and goes
// on at the poll after it accepted the route.
func TestWaitRouteAccepted(t *testing.T) {
	r, dyn, clk, msgs := routeRunner(t, routeObj("epw", 1))
	answer := func() {
		// The clock has waiters from the start; answer once the run has
		// read the route without an answer.
		for len(msgs()) == 0 {
			goruntime.Gosched()
		}
		u := routeObj("epw", 1, parentStatus(traefikGateway, gwRef(),
			condObj("Accepted", "True", "Accepted", "", 1), condObj("ResolvedRefs", "True", "ResolvedRefs", "", 1)))
		if err := dyn.Tracker().Update(deploy.HTTPRouteResource, u, "epw"); err != nil {
			t.Error(err)
		}
	}
	if err := runWaitRoute(t, r, clk, routePoll, answer); err != nil {
		t.Fatalf("waitRoute: %v", err)
	}
	got := strings.Join(msgs(), "\n")
	for _, s := range []string{"waiting for controller traefik.io/gateway-controller", "HTTPRoute epw/probe accepted by Gateway gw/traefik"} {
		if !strings.Contains(got, s) {
			t.Errorf("progress %q does not say %q", got, s)
		}
	}
}

// A refusal ends the wait at once, with the controller's reason.
func TestWaitRouteRefused(t *testing.T) {
	r, _, clk, _ := routeRunner(t, routeObj("epw", 1, parentStatus(traefikGateway, gwRef(),
		condObj("Accepted", "False", "NotAllowedByListeners", "no listener allows routes from namespace epw", 1))))
	err := runWaitRoute(t, r, clk, routePoll, nil)
	if err == nil || !strings.Contains(err.Error(), "not accepted by Gateway gw/traefik (controller traefik.io/gateway-controller): NotAllowedByListeners") {
		t.Errorf("waitRoute = %v, want the controller's refusal", err)
	}
}

// No answer within --settle-timeout: the error names the controller.
func TestWaitRouteTimeout(t *testing.T) {
	r, _, clk, _ := routeRunner(t, routeObj("epw", 1))
	err := runWaitRoute(t, r, clk, r.cfg.SettleTimeout, nil)
	for _, s := range []string{"controller traefik.io/gateway-controller did not accept it on Gateway gw/traefik within 1m0s (--settle-timeout)",
		"is traefik.io/gateway-controller running?"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("waitRoute = %v, want it to say %q", err, s)
		}
	}
}

// An Ingress run has nothing to wait for.
func TestWaitRouteIngress(t *testing.T) {
	r, _, _, _ := routeRunner(t, nil)
	r.wl.HTTPRoute = nil
	if err := r.waitRoute(context.Background()); err != nil {
		t.Errorf("waitRoute = %v", err)
	}
}

// The HTTPRoute is created in place of the Ingress, and cleanup in a shared
// namespace deletes it by name under the UID its create returned.
func TestCreateAndCleanupHTTPRoute(t *testing.T) {
	const ns = "team-a"
	r, cs, clk, _ := cleanupRunner(t, ns, true)
	wl, err := deploy.Render(deploy.Params{Namespace: ns, Name: "epwindow-abc123", Replicas: 2, Image: deploy.DefaultImage,
		Hold: time.Minute, RunID: "abc123", Route: deploy.RouteHTTPRoute, Gateway: traefikGW.Ref})
	if err != nil {
		t.Fatal(err)
	}
	r.wl, r.dynamic = wl, gatewayAPI(t)
	if err := r.create(context.Background()); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := r.dynamic.Resource(deploy.HTTPRouteResource).Namespace(ns).Get(context.Background(), "epwindow-abc123", metav1.GetOptions{}); err != nil {
		t.Errorf("HTTPRoute not created: %v", err)
	}
	if list, _ := cs.NetworkingV1().Ingresses(ns).List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("an Ingress was created with --route httproute")
	}
	r.made.httproute = types.UID("route-uid") // the fake assigns none
	if _, err := runCleanup(t, r, clk); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	var deletes []k8stesting.DeleteActionImpl
	for _, a := range r.dynamic.(*dynamicfake.FakeDynamicClient).Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok {
			deletes = append(deletes, d)
		}
	}
	if len(deletes) != 1 || deletes[0].GetResource() != deploy.HTTPRouteResource || deletes[0].Name != "epwindow-abc123" ||
		deletes[0].DeleteOptions.Preconditions == nil || *deletes[0].DeleteOptions.Preconditions.UID != "route-uid" {
		t.Errorf("dynamic deletes %+v, want the HTTPRoute epwindow-abc123 under UID route-uid", deletes)
	}
	if _, err := r.dynamic.Resource(deploy.HTTPRouteResource).Namespace(ns).Get(context.Background(), "epwindow-abc123", metav1.GetOptions{}); err == nil {
		t.Error("the HTTPRoute is still there after cleanup")
	}
}
