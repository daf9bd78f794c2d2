package deploy

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func httpRouteParams() Params {
	p := testParams()
	p.IngressClass = ""
	p.Route = RouteHTTPRoute
	p.Gateway = GatewayRef{Namespace: "gw", Name: "traefik"}
	return p
}

func TestParseGatewayRef(t *testing.T) {
	tests := []struct {
		gateway, section string
		want             GatewayRef
		err              string
	}{
		{"gw/traefik", "", GatewayRef{Namespace: "gw", Name: "traefik"}, ""},
		{"gw/traefik", "web", GatewayRef{Namespace: "gw", Name: "traefik", Section: "web"}, ""},
		{"", "", GatewayRef{}, ""},
		{"traefik", "", GatewayRef{}, `--gateway "traefik": want NAMESPACE/NAME`},
		{"/traefik", "", GatewayRef{}, "want NAMESPACE/NAME"},
		{"gw/", "", GatewayRef{}, "want NAMESPACE/NAME"},
		{"gw/traefik/web", "", GatewayRef{}, "want NAMESPACE/NAME"},
		{"GW/traefik", "", GatewayRef{}, "--gateway GW/traefik: namespace"},
		{"gw/traefik", "Web", GatewayRef{}, `--gateway-section "Web"`},
	}
	for _, tt := range tests {
		got, err := ParseGatewayRef(tt.gateway, tt.section)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseGatewayRef(%q, %q) = %+v, %v; want %+v", tt.gateway, tt.section, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseGatewayRef(%q, %q) error %v, want one containing %q", tt.gateway, tt.section, err, tt.err)
		}
	}
	if s := (GatewayRef{Namespace: "gw", Name: "traefik", Section: "web"}).String(); s != "gw/traefik/web" {
		t.Errorf("String() = %q", s)
	}
}

// TestRenderHTTPRoute: --route httproute swaps the Ingress for an HTTPRoute
// on the Gateway, for the host, to the probe Service; everything else is
// what the Ingress run gets.
func TestRenderHTTPRoute(t *testing.T) {
	p := httpRouteParams()
	p.Port = 9090
	wl := mustRender(t, p)
	if wl.Ingress != nil {
		t.Errorf("an Ingress was rendered with --route httproute: %+v", wl.Ingress)
	}
	u := wl.HTTPRoute
	if u == nil {
		t.Fatal("no HTTPRoute")
	}
	if u.GetAPIVersion() != "gateway.networking.k8s.io/v1" || u.GetKind() != "HTTPRoute" {
		t.Errorf("HTTPRoute is %s %s", u.GetAPIVersion(), u.GetKind())
	}
	if u.GetName() != "probe" || u.GetNamespace() != "epwindow-x7k2q" {
		t.Errorf("HTTPRoute %s/%s, want epwindow-x7k2q/probe", u.GetNamespace(), u.GetName())
	}
	wantLabels := map[string]string{LabelName: NameValue, LabelInstance: "probe", LabelManagedBy: ManagedByValue, LabelRunID: "run-1", "team": "platform"}
	if got := u.GetLabels(); !reflect.DeepEqual(got, wantLabels) {
		t.Errorf("labels = %v, want %v", got, wantLabels)
	}
	wantSpec := map[string]any{
		"parentRefs": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "gw", "name": "traefik"}},
		"hostnames":  []any{"probe.epwindow.test"},
		"rules": []any{map[string]any{
			"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/"}}},
			"backendRefs": []any{map[string]any{"name": "probe", "port": int64(9090)}},
		}},
	}
	if got := u.Object["spec"]; !reflect.DeepEqual(got, wantSpec) {
		t.Errorf("spec =\n%#v\nwant\n%#v", got, wantSpec)
	}

	// The pods and their Service are the Ingress run's.
	ing := testParams()
	ing.IngressClass, ing.Port = "", 9090
	want := mustRender(t, ing)
	if !apiequality.Semantic.DeepEqual(wl.Deployment, want.Deployment) || !apiequality.Semantic.DeepEqual(wl.Service, want.Service) ||
		!apiequality.Semantic.DeepEqual(wl.Namespace, want.Namespace) {
		t.Error("the Namespace, Deployment or Service differ from the Ingress run's")
	}
}

func TestRenderHTTPRouteSectionAndAnyHost(t *testing.T) {
	p := httpRouteParams()
	p.Gateway.Section, p.Host = "web", ""
	u := mustRender(t, p).HTTPRoute
	refs, _, _ := unstructured.NestedSlice(u.Object, "spec", "parentRefs")
	if len(refs) != 1 || refs[0].(map[string]any)["sectionName"] != "web" {
		t.Errorf("parentRefs = %v, want one with sectionName web", refs)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "hostnames"); found {
		t.Errorf("hostnames set with --host \"\": an HTTPRoute without hostnames matches any host")
	}
}

// TestWriteYAMLHTTPRoute: manifests prints the HTTPRoute last, in place of
// the Ingress, and it reads back as rendered.
func TestWriteYAMLHTTPRoute(t *testing.T) {
	wl := mustRender(t, httpRouteParams())
	var buf bytes.Buffer
	if err := WriteYAML(&buf, wl); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(buf.String(), "\n---\n")
	if len(docs) != 4 {
		t.Fatalf("got %d documents, want 4 (Namespace, Deployment, Service, HTTPRoute):\n%s", len(docs), buf.String())
	}
	if strings.Contains(buf.String(), "kind: Ingress") {
		t.Errorf("the YAML has an Ingress:\n%s", buf.String())
	}
	js, err := yaml.YAMLToJSON([]byte(docs[3]))
	if err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	if err := got.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Object, wl.HTTPRoute.Object) {
		t.Errorf("HTTPRoute reads back as\n%v\nwant\n%v", got.Object, wl.HTTPRoute.Object)
	}
}
