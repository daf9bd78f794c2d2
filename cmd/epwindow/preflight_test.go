package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure"
)

// gatewayObjects are Gateway gw/traefik, whose Accepted condition has
// status accepted, and (with class) its GatewayClass traefik.
func gatewayObjects(t *testing.T, accepted string, class bool) *dynamicfake.FakeDynamicClient {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		deploy.GatewayResource: "GatewayList", deploy.GatewayClassResource: "GatewayClassList", deploy.HTTPRouteResource: "HTTPRouteList"})
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"namespace": "gw", "name": "traefik"},
		"spec":     map[string]any{"gatewayClassName": "traefik"},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Accepted", "status": accepted,
			"reason": "Pending", "message": "Waiting for controller"}}},
	}}
	if err := dyn.Tracker().Create(deploy.GatewayResource, gw, "gw"); err != nil {
		t.Fatal(err)
	}
	if class {
		gc := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": map[string]any{"name": "traefik"},
			"spec": map[string]any{"controllerName": "traefik.io/gateway-controller"},
		}}
		if err := dyn.Tracker().Create(deploy.GatewayClassResource, gc, ""); err != nil {
			t.Fatal(err)
		}
	}
	return dyn
}

// The preflight of an HTTPRoute run checks the Gateway before anything is
// created, with the exit code that fits: a Gateway that does not exist is
// bad input (2); missing CRDs, a missing class or a Gateway no controller
// accepted leave the cluster unusable (4). Only the Gateway API
// permissions are asked for, the Gateway's in its own namespace.
func TestPreflightGateway(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tests := []struct {
		name    string
		gateway string
		noCRD   bool
		dyn     func(*testing.T) *dynamicfake.FakeDynamicClient
		code    int
		want    string
	}{
		{"accepted", "gw/traefik", false, func(t *testing.T) *dynamicfake.FakeDynamicClient { return gatewayObjects(t, "True", true) }, exitOK, ""},
		{"missing gateway", "gw/other", false, func(t *testing.T) *dynamicfake.FakeDynamicClient { return gatewayObjects(t, "True", true) }, exitUsage,
			"--gateway gw/other: Gateway not found"},
		// No CRDs, no objects: the API server answers 404 as for a
		// missing Gateway, and discovery tells the two apart.
		{"missing CRDs", "gw/traefik", true, func(*testing.T) *dynamicfake.FakeDynamicClient {
			return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), nil)
		}, exitCluster,
			"Gateway API CRDs are not installed"},
		{"gateway pending", "gw/traefik", false, func(t *testing.T) *dynamicfake.FakeDynamicClient { return gatewayObjects(t, "Unknown", true) }, exitCluster,
			"Gateway gw/traefik (class traefik, controller traefik.io/gateway-controller): no controller has accepted it"},
		{"missing class", "gw/traefik", false, func(t *testing.T) *dynamicfake.FakeDynamicClient { return gatewayObjects(t, "True", false) }, exitCluster,
			`names GatewayClass "traefik", which does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			var reviewed []string
			cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
				ra := r.Spec.ResourceAttributes
				reviewed = append(reviewed, ra.Verb+" "+ra.Resource+" "+ra.Namespace)
				r.Status.Allowed = true
				return true, r, nil
			})
			if !tt.noCRD {
				cs.Resources = []*metav1.APIResourceList{{GroupVersion: "gateway.networking.k8s.io/v1",
					APIResources: []metav1.APIResource{{Name: "gateways", Namespaced: true, Kind: "Gateway"}}}}
			}
			ns, name, _ := strings.Cut(tt.gateway, "/")
			cfg := measure.Config{Client: cs, RESTConfig: &rest.Config{Host: "https://cluster.example"}, Dynamic: tt.dyn(t), URL: u,
				Route: measure.RouteHTTPRoute, Gateway: measure.GatewayRef{Namespace: ns, Name: name}}
			code, err := preflight(context.Background(), cfg)
			if code != tt.code {
				t.Errorf("exit code %d, want %d (err %v)", code, tt.code, err)
			}
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
			got := strings.Join(reviewed, ", ")
			for _, s := range []string{"create httproutes ", "get gateways gw", "get gatewayclasses "} {
				if !strings.Contains(got, s) {
					t.Errorf("permissions checked: %s; want %q", got, s)
				}
			}
			if strings.Contains(got, "ingresses") || strings.Contains(got, "ingressclasses") {
				t.Errorf("an HTTPRoute run was checked for Ingress permissions: %s", got)
			}
		})
	}
}

// measure --target's preflight checks deploy/rbac/target's verbs in the
// Deployment's namespace and names every missing one (exit 5) before the
// Deployment is patched.
func TestPreflightTarget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		denied map[string]bool // "verb resource/subresource"
		code   int
	}{
		{"all granted", nil, exitOK},
		{"no evictions, no patch", map[string]bool{"create pods/eviction": true, "patch deployments": true}, exitForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			var reviewed []string
			cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
				ra := r.Spec.ResourceAttributes
				key := ra.Verb + " " + ra.Resource
				if ra.Subresource != "" {
					key += "/" + ra.Subresource
				}
				reviewed = append(reviewed, key+" "+ra.Namespace)
				r.Status.Allowed = !tc.denied[key]
				return true, r, nil
			})
			cfg := measure.Config{Client: cs, RESTConfig: &rest.Config{Host: "https://cluster.example"}, Namespace: "team",
				Target: measure.TargetOptions{Deployment: "web"}, Rate: 0}
			code, err := preflight(context.Background(), cfg)
			if code != tc.code {
				t.Fatalf("exit code %d, want %d (err %v)", code, tc.code, err)
			}
			for k := range tc.denied {
				if err == nil || !strings.Contains(err.Error(), strings.Split(k, " ")[1]) || !strings.Contains(err.Error(), "deploy/rbac/target") {
					t.Errorf("error %v: want it to name %s and deploy/rbac/target", err, k)
				}
			}
			got := strings.Join(reviewed, ", ")
			for _, want := range []string{"create pods/eviction team", "patch deployments team", "get pods/proxy team", "list services team"} {
				if !strings.Contains(got, want) {
					t.Errorf("permissions checked: %s; want %q", got, want)
				}
			}
			if strings.Contains(got, "create deployments") || strings.Contains(got, "create namespaces") {
				t.Errorf("a --target run was checked for the probe workload's creates: %s", got)
			}
		})
	}
}
