package measure

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/epwindow/epwindow/deploy"
)

// gatewayListKinds lets the fake dynamic client list the Gateway API
// resources it is never given a scheme for.
var gatewayListKinds = map[schema.GroupVersionResource]string{
	deploy.HTTPRouteResource:    "HTTPRouteList",
	deploy.GatewayResource:      "GatewayList",
	deploy.GatewayClassResource: "GatewayClassList",
}

// gatewayAPI is a fake dynamic client holding objs. They are created under
// the resource their kind has: the fake's own guess from the kind would
// file a Gateway under "gatewaies".
func gatewayAPI(t *testing.T, objs ...*unstructured.Unstructured) *dynamicfake.FakeDynamicClient {
	t.Helper()
	d := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), gatewayListKinds)
	for _, o := range objs {
		gvr := map[string]schema.GroupVersionResource{"Gateway": deploy.GatewayResource, "GatewayClass": deploy.GatewayClassResource,
			"HTTPRoute": deploy.HTTPRouteResource}[o.GetKind()]
		if err := d.Tracker().Create(gvr, o, o.GetNamespace()); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// servingGatewayAPI is a clientset whose discovery serves the Gateway API
// v1 (installed CRDs).
func servingGatewayAPI() *fake.Clientset {
	cs := fake.NewClientset()
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "gateway.networking.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "gateways", Namespaced: true, Kind: "Gateway"}, {Name: "gatewayclasses", Kind: "GatewayClass"},
		{Name: "httproutes", Namespaced: true, Kind: "HTTPRoute"}}}}
	return cs
}

func condObj(typ, status, reason, message string, gen int64) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": message, "observedGeneration": gen}
}

// gatewayObj is Gateway gw/traefik of class traefik with a listener "web"
// and the given status conditions.
func gatewayObj(conds ...map[string]any) *unstructured.Unstructured {
	cs := make([]any, len(conds))
	for i, c := range conds {
		cs[i] = c
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"namespace": "gw", "name": "traefik", "generation": int64(1)},
		"spec": map[string]any{"gatewayClassName": "traefik",
			"listeners": []any{map[string]any{"name": "web", "port": int64(8000), "protocol": "HTTP"}}},
		"status": map[string]any{"conditions": cs},
	}}
}

func gatewayClassObj() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": "traefik"},
		"spec":     map[string]any{"controllerName": "traefik.io/gateway-controller"},
	}}
}

func TestCheckGateway(t *testing.T) {
	accepted := condObj("Accepted", "True", "Accepted", "", 1)
	// What the CRD's defaulting gives a Gateway no controller has seen.
	pending := condObj("Accepted", "Unknown", "Pending", "Waiting for controller", 0)
	ref := GatewayRef{Namespace: "gw", Name: "traefik"}
	tests := []struct {
		name    string
		ref     GatewayRef
		noCRD   bool
		objs    []*unstructured.Unstructured
		flagErr bool     // bad input: exit 2
		cluster bool     // unusable cluster: exit 4
		want    []string // in the error message
	}{
		{"accepted", ref, false, []*unstructured.Unstructured{gatewayObj(accepted), gatewayClassObj()}, false, false, nil},
		{"accepted, listener named", GatewayRef{Namespace: "gw", Name: "traefik", Section: "web"}, false,
			[]*unstructured.Unstructured{gatewayObj(accepted), gatewayClassObj()}, false, false, nil},
		{"missing gateway", ref, false, []*unstructured.Unstructured{gatewayClassObj()}, true, false,
			[]string{"--gateway gw/traefik: Gateway not found"}},
		{"missing CRDs", ref, true, nil, false, true,
			[]string{"--gateway gw/traefik", "Gateway API CRDs are not installed"}},
		{"missing listener", GatewayRef{Namespace: "gw", Name: "traefik", Section: "websecure"}, false,
			[]*unstructured.Unstructured{gatewayObj(accepted), gatewayClassObj()}, true, false,
			[]string{"--gateway-section websecure", "no listener of that name (it has: web)"}},
		{"gateway pending", ref, false, []*unstructured.Unstructured{gatewayObj(pending), gatewayClassObj()}, false, true,
			[]string{"Gateway gw/traefik (class traefik, controller traefik.io/gateway-controller)", "no controller has accepted it",
				"Accepted=Unknown Pending: Waiting for controller", "is traefik.io/gateway-controller running?"}},
		{"gateway without status", ref, false, []*unstructured.Unstructured{gatewayObj(), gatewayClassObj()}, false, true,
			[]string{"no controller has accepted it (no Accepted condition)"}},
		{"missing class", ref, false, []*unstructured.Unstructured{gatewayObj(pending)}, false, true,
			[]string{"Gateway gw/traefik", `GatewayClass "traefik", which does not exist`, "no controller has accepted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := servingGatewayAPI()
			if tt.noCRD {
				cs.Resources = nil
			}
			g, err := CheckGateway(context.Background(), cs.Discovery(), gatewayAPI(t, tt.objs...), tt.ref)
			var fe *FlagError
			var ce *ClusterError
			if got := errors.As(err, &fe); got != tt.flagErr {
				t.Errorf("FlagError %v, want %v (err %v)", got, tt.flagErr, err)
			}
			if got := errors.As(err, &ce); got != tt.cluster {
				t.Errorf("ClusterError %v, want %v (err %v)", got, tt.cluster, err)
			}
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("CheckGateway: %v", err)
				}
				if g.Class != "traefik" || g.Controller != "traefik.io/gateway-controller" || g.Ref != tt.ref {
					t.Errorf("CheckGateway = %+v", g)
				}
				return
			}
			for _, s := range tt.want {
				if err == nil || !strings.Contains(err.Error(), s) {
					t.Errorf("error %v, want it to contain %q", err, s)
				}
			}
		})
	}
}
