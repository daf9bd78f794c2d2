package upstream

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func aps(ss ...string) []netip.AddrPort {
	out := []netip.AddrPort{}
	for _, s := range ss {
		out = append(out, netip.MustParseAddrPort(s))
	}
	return out
}

func equalAPs(a, b []netip.AddrPort) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return slices.Equal(a, b)
}

var probeTarget = Target{Namespace: "epwindow", Service: "epwindow-probe", Port: 80, Ingress: "probe", Host: "probe.local"}

// Fixture testdata/skipper_routes.json follows eskip/json.go (jsonRoute) and
// the route IDs of routeID in dataclients/kubernetes/ingress.go
// (github.com/zalando/skipper): an lb backend (one endpoint with a zone
// query, as LBEndpoint.StringWithZone writes it), a network backend (one
// endpoint), a shunt (no endpoints), an east-west copy, and routes of other
// Ingresses and Services.
func TestUpstreamsFromSkipper(t *testing.T) {
	body := fixture(t, "skipper_routes.json")
	for _, tc := range []struct {
		name   string
		target Target
		want   []netip.AddrPort
	}{
		{"lb and network routes of the ingress", probeTarget,
			aps("10.244.0.5:8080", "10.244.0.6:8080", "10.244.0.7:8080", "10.244.0.8:8080")},
		{"any ingress of the service", Target{Namespace: "epwindow", Service: "epwindow-probe"},
			aps("10.244.0.5:8080", "10.244.0.6:8080", "10.244.0.7:8080", "10.244.0.8:8080", "10.244.3.3:8080")},
		{"other namespace", Target{Namespace: "other", Service: "web", Ingress: "web"}, aps("10.244.1.1:80", "10.244.1.2:80")},
		{"no such service", Target{Namespace: "epwindow", Service: "nope", Ingress: "probe"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := upstreamsFromSkipper(body, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if !equalAPs(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got, err := upstreamsFromSkipper([]byte("[]"), probeTarget); err != nil || len(got) != 0 {
		t.Errorf("empty table: got %v, %v", got, err)
	}
	if _, err := upstreamsFromSkipper([]byte("kube_x: * -> <shunt>;"), probeTarget); err == nil || !strings.Contains(err.Error(), "application/json") {
		t.Errorf("eskip text instead of JSON: want an error naming the Accept header, got %v", err)
	}
}

// Fixture testdata/nginx_backends.json follows what configureBackends
// (internal/ingress/controller/nginx.go) POSTs and
// rootfs/etc/nginx/lua/configuration.lua serves back: ingress.Backend with
// ingress.Endpoint (pkg/apis/ingress/types.go), names from upstreamName
// (internal/ingress/controller/util.go); a second port, a backend with no
// endpoints (omitempty) and the default backend.
func TestUpstreamsFromNginx(t *testing.T) {
	body := fixture(t, "nginx_backends.json")
	for _, tc := range []struct {
		name   string
		target Target
		want   []netip.AddrPort
	}{
		{"port 80", probeTarget, aps("10.244.0.5:8080", "10.244.0.6:8080", "[fd00:10:244::7]:8080")},
		{"every port", Target{Namespace: "epwindow", Service: "epwindow-probe"},
			aps("10.244.0.5:8080", "10.244.0.5:8443", "10.244.0.6:8080", "[fd00:10:244::7]:8080")},
		{"backend without endpoints", Target{Namespace: "epwindow", Service: "epwindow-probe-empty", Port: 80}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := upstreamsFromNginx(body, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if !equalAPs(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// Fixture testdata/traefik_services.json follows serviceRepresentation
// (pkg/api/handler_http.go) over runtime.ServiceInfo and dynamic.Server
// (pkg/config/dynamic/http_config.go: url, fenced), service names from
// pkg/provider/kubernetes/ingress/kubernetes.go: a fenced (terminating)
// server, a server a health check marked DOWN, another Service whose name
// starts with the probe's ("epwindow-probe-canary"), an empty service, an
// internal one.
func TestUpstreamsFromTraefik(t *testing.T) {
	body := fixture(t, "traefik_services.json")
	for _, tc := range []struct {
		name   string
		target Target
		want   []netip.AddrPort
	}{
		{"fenced and down servers are withdrawn", probeTarget, aps("10.244.0.5:8080", "10.244.0.7:8080")},
		{"every port, not the canary's", Target{Namespace: "epwindow", Service: "epwindow-probe", Ingress: "probe"}, aps("10.244.0.5:8080", "10.244.0.7:8080")},
		{"the canary", Target{Namespace: "epwindow", Service: "epwindow-probe-canary", Port: 80, Ingress: "probe-canary"}, aps("10.244.0.99:8080")},
		{"empty service", Target{Namespace: "epwindow", Service: "empty", Port: 80}, nil},
		{"other service", Target{Namespace: "other", Service: "web"}, aps("10.244.1.1:80")},
		{"not through an HTTPRoute", Target{Namespace: "epwindow", Service: "epwindow-probe", Port: 80, Route: "probe"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := upstreamsFromTraefik(body, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if !equalAPs(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// routeTarget is the probe reached through an HTTPRoute.
var routeTarget = Target{Namespace: "epwindow", Service: "epwindow-probe", Port: 8080, Route: "probe", Host: "probe.local"}

// Fixture testdata/traefik_gateway_services.json is what Traefik's Gateway
// provider (pkg/provider/kubernetes/gateway/httproute.go) puts behind
// serviceRepresentation (pkg/api/handler_http.go): per backendRef a
// loadBalancer service Normalize(<ns>-<service>-http-<port>) holding only
// Ready endpoints (getBackendAddresses in gateway/kubernetes.go; the
// probe's terminating 10.244.0.6 is absent, not fenced) and one of them DOWN;
// per route rule a weighted "…-wrr" service naming it, with no servers; a
// GRPCRoute's service (Normalize(<ns>-<service>-<port>-grpc), grpcroute.go);
// another run's "epwindow-probe-2"; and the Ingress provider's service for a
// Service "epwindow-probe-http", whose name differs only by its provider.
func TestUpstreamsFromTraefikGateway(t *testing.T) {
	body := fixture(t, "traefik_gateway_services.json")
	for _, tc := range []struct {
		name   string
		target Target
		want   []netip.AddrPort
	}{
		{"ready servers, one down", routeTarget, aps("10.244.0.5:8080", "10.244.0.7:8080")},
		{"every port: not the gRPC service", Target{Namespace: "epwindow", Service: "epwindow-probe", Route: "probe"}, aps("10.244.0.5:8080", "10.244.0.7:8080")},
		{"no route named: the Gateway provider's too", Target{Namespace: "epwindow", Service: "epwindow-probe", Port: 8080}, aps("10.244.0.5:8080", "10.244.0.7:8080")},
		{"the other run", Target{Namespace: "epwindow", Service: "epwindow-probe-2", Port: 8080, Route: "probe-2"}, aps("10.244.9.9:8080")},
		{"same name, Ingress provider", Target{Namespace: "epwindow", Service: "epwindow-probe-http", Port: 8080, Ingress: "web"}, aps("10.244.8.8:8080")},
		{"another port", Target{Namespace: "epwindow", Service: "epwindow-probe", Port: 80, Route: "probe"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := upstreamsFromTraefik(body, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if !equalAPs(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// Fixture testdata/traefik_ingressnginx_services.json is what Traefik's
// ingress-nginx provider (pkg/provider/kubernetes/ingress-nginx/kubernetes.go)
// puts behind serviceRepresentation: services
// Normalize(<ns>-<ingress>-<service>-<port>) "@kubernetesingressnginx", the
// probe's with a server DOWN, a serving terminating endpoint 10.244.0.9 that
// v3.6.12 lists as an ordinary server (buildService copies only the URL), and
// a fenced one, 10.244.0.6, as the Ingress provider writes it (should a
// release copy Fenced); a second Service of the same Ingress
// ("epwindow-probe-2", whose name the probe's is a prefix of), another run's
// Ingress, the Ingress's default backend and the global default backend.
func TestUpstreamsFromTraefikIngressNGINX(t *testing.T) {
	body := fixture(t, "traefik_ingressnginx_services.json")
	probe := Target{Namespace: "epwindow", Service: "epwindow-probe", Port: 8080, Ingress: "epwindow-probe"}
	for _, tc := range []struct {
		name   string
		target Target
		want   []netip.AddrPort
	}{
		{"fenced and down withdrawn, unfenced terminating present", probe, aps("10.244.0.5:8080", "10.244.0.7:8080", "10.244.0.9:8080")},
		{"every port: not the second Service", Target{Namespace: "epwindow", Service: "epwindow-probe", Ingress: "epwindow-probe"},
			aps("10.244.0.5:8080", "10.244.0.7:8080", "10.244.0.9:8080")},
		{"second Service of the Ingress", Target{Namespace: "epwindow", Service: "epwindow-probe-2", Port: 8080, Ingress: "epwindow-probe"}, aps("10.244.9.8:8080")},
		{"the other run", Target{Namespace: "epwindow", Service: "epwindow-probe-2", Port: 8080, Ingress: "epwindow-probe-2"}, aps("10.244.9.9:8080")},
		{"no Ingress named: nothing of this provider", Target{Namespace: "epwindow", Service: "epwindow-probe", Port: 8080, Route: "probe"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := upstreamsFromTraefik(body, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if !equalAPs(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTraefikServiceMatches: names match exactly, provider included, never
// by prefix.
func TestTraefikServiceMatches(t *testing.T) {
	ing := Target{Namespace: "ns", Service: "epwindow-abc", Port: 8080, Ingress: "epwindow-abc"}
	route := Target{Namespace: "ns", Service: "epwindow-abc", Port: 8080, Route: "epwindow-abc"}
	anyPort := Target{Namespace: "ns", Service: "epwindow-abc", Ingress: "epwindow-abc"}
	for _, tc := range []struct {
		name   string
		target Target
		want   bool
	}{
		{"ns-epwindow-abc-8080@kubernetes", ing, true},
		{"ns-epwindow-abcd-8080@kubernetes", ing, false},
		{"ns-epwindow-abc-8080", ing, false},
		{"ns-epwindow-abc-8080@kubernetescrd", ing, false},
		{"ns-epwindow-abc-8080@kubernetesgateway", ing, false},
		{"ns-epwindow-abc-http-8080@kubernetesgateway", route, true},
		{"ns-epwindow-abcd-http-8080@kubernetesgateway", route, false},
		{"ns-epwindow-abc-http-8080@kubernetes", route, false},
		{"ns-epwindow-abc-epwindow-abc-8080@kubernetesingressnginx", ing, true},
		{"ns-epwindow-abc-epwindow-abcd-8080@kubernetesingressnginx", ing, false},
		{"ns-epwindow-abcd-epwindow-abc-8080@kubernetesingressnginx", ing, false},
		{"ns-epwindow-abc-epwindow-abc-8080@kubernetesingressnginx", route, false},
		{"ns-epwindow-abc-http@kubernetes", anyPort, true},
		{"ns-epwindow-abc-d-80@kubernetes", anyPort, false},
		{"ns-epwindow-abc-@kubernetes", anyPort, false},
		{"ns-epwindow-abc-epwindow-abc-80@kubernetesingressnginx", anyPort, true},
	} {
		if got := traefikServiceMatches(tc.name, tc.target); got != tc.want {
			t.Errorf("traefikServiceMatches(%q, %+v) = %v, want %v", tc.name, tc.target, got, tc.want)
		}
	}
}

// Fixture testdata/traefik_version.json follows the struct Handler.Append
// writes in pkg/version/version.go.
func TestTraefikVersion(t *testing.T) {
	v, err := traefikVersion(fixture(t, "traefik_version.json"))
	if err != nil || v != "3.6.12" {
		t.Errorf("got %q, %v; want 3.6.12", v, err)
	}
	if _, err := traefikVersion([]byte("404 page not found")); err == nil {
		t.Error("a non-JSON body decoded")
	}
}

// Fixture testdata/envoy_clusters.json follows envoy.admin.v3.Clusters
// (api/envoy/admin/v3/clusters.proto, proto field names): a Contour cluster
// with HEALTHY, DRAINING, failed active health check, pending dynamic
// removal, DEGRADED and unset statuses, an Istio cluster with an UNHEALTHY
// host, a cluster without hosts, and an Envoy Gateway route cluster.
func TestUpstreamsFromEnvoy(t *testing.T) {
	body := fixture(t, "envoy_clusters.json")
	for _, tc := range []struct {
		name    string
		cluster *regexp.Regexp
		want    []netip.AddrPort
	}{
		{"contour and istio names; draining, failed and pending removal withdrawn", EnvoyClusterPattern(probeTarget),
			aps("10.244.0.5:8080", "10.244.0.9:8080", "10.244.0.10:8080", "10.244.0.11:8080")},
		{"cluster without hosts", EnvoyClusterPattern(Target{Namespace: "epwindow", Service: "epwindow-probe-empty", Port: 80}), nil},
		{"envoy gateway route cluster by --envoy-cluster", regexp.MustCompile(`^httproute/epwindow/probe/`), aps("10.244.2.1:8080")},
		{"envoy gateway route cluster of the Target's HTTPRoute", EnvoyClusterPattern(Target{Namespace: "epwindow", Service: "nope", Port: 80, Route: "probe"}),
			aps("10.244.2.1:8080")},
		{"another HTTPRoute", EnvoyClusterPattern(Target{Namespace: "epwindow", Service: "nope", Port: 80, Route: "prob"}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := upstreamsFromEnvoy(body, tc.cluster)
			if err != nil {
				t.Fatal(err)
			}
			if !equalAPs(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUpstreamsFromLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []netip.AddrPort
		wantErr  string
	}{
		{"ip:port lines", "10.0.1.5:8080\n10.0.2.7:8080\n", aps("10.0.1.5:8080", "10.0.2.7:8080"), ""},
		{"aws text columns", "10.0.1.5\t8080\n10.0.2.7\t8080\n", aps("10.0.1.5:8080", "10.0.2.7:8080"), ""},
		{"bare ip, comments, blanks, v6", "# targets\n\n10.0.1.5\n[fd00::1]:80\n", aps("10.0.1.5:0", "[fd00::1]:80"), ""},
		{"duplicates", "10.0.1.5:80\n10.0.1.5:80\n", aps("10.0.1.5:80"), ""},
		{"empty", "", nil, ""},
		{"garbage", "10.0.1.5:80\nnot-an-address\n", nil, "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := upstreamsFromLines([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equalAPs(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestArgValueAndSettings(t *testing.T) {
	nginx := []string{"/nginx-ingress-controller", "--publish-service=$(POD_NAMESPACE)/ingress-nginx-controller", "--sync-rate-limit=0.5", "--election-id=x"}
	skipper := []string{"skipper", "-kubernetes", "-source-poll-timeout", "1500", "-address=:9999"}
	traefik := []string{"--providers.kubernetesingress", "--Providers.ProvidersThrottleDuration=5s"}
	for _, tc := range []struct {
		args       []string
		flag, want string
		ok         bool
	}{
		{nginx, "sync-rate-limit", "0.5", true},
		{skipper, "source-poll-timeout", "1500", true},
		{skipper, "kubernetes", "true", true},
		{traefik, "providers.providersThrottleDuration", "5s", true},
		{nginx, "status-port", "", false},
	} {
		got, ok := argValue(tc.args, tc.flag)
		if got != tc.want || ok != tc.ok {
			t.Errorf("argValue(%v, %q) = %q, %v; want %q, %v", tc.args, tc.flag, got, ok, tc.want, tc.ok)
		}
	}
	got := settingsFromArgs([][]string{nginx, {"/nginx-ingress-controller"}}, "sync-rate-limit", "sync-rate-limit", "0.3")
	if got["sync-rate-limit"] != "0.5,0.3 (default)" {
		t.Errorf("settings over two replicas = %v", got)
	}
}
