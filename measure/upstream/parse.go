package upstream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// The parsers below are pure: one controller payload in, the addresses that
// receive new traffic for the Target out. Each follows the controller's own
// source, cited at the type it decodes into.

// skipperRoute is one route of Skipper's GET /routes with
// Accept: application/json: eskip/json.go (jsonRoute, jsonBackend) in
// github.com/zalando/skipper. Backend types are eskip.BackendType.String():
// "network" (one endpoint, in address), "lb" (endpoints), "shunt", ...
type skipperRoute struct {
	ID      string `json:"id"`
	Backend *struct {
		Type      string   `json:"type"`
		Address   string   `json:"address"`
		Endpoints []string `json:"endpoints"`
	} `json:"backend"`
}

// skipperNonWord is the character class Skipper's kubernetes dataclient
// replaces by "_" in route IDs: dataclients/kubernetes/ingress.go (nonWord).
var skipperNonWord = regexp.MustCompile(`\W`)

// skipperRouteMatches tells whether a route ID was built for the Target.
// Skipper's kubernetes dataclient names Ingress routes
// kube_<ns>__<ingress>__<host>__<path>__<service> (routeID in
// dataclients/kubernetes/ingress.go); east-west copies ("kubeew_…") and
// RouteGroups are other prefixes and do not match.
func skipperRouteMatches(id string, t Target) bool {
	w := func(s string) string { return skipperNonWord.ReplaceAllString(s, "_") }
	prefix := "kube_" + w(t.Namespace) + "__"
	if t.Ingress != "" {
		prefix += w(t.Ingress) + "__"
	}
	return strings.HasPrefix(id, prefix) && strings.HasSuffix(id, "__"+w(t.Service))
}

// upstreamsFromSkipper reads Skipper's route table. The dataclient turns a
// Service with one endpoint into a "network" backend, with several into an
// "lb" backend listing them, and with none into a shunt
// (convertPathRuleV1 in dataclients/kubernetes/ingressv1.go); it leaves out
// terminating endpoints (isReady in dataclients/kubernetes/endpointslices.go).
// Every route of the Target counts: an address is routed while any lists it.
func upstreamsFromSkipper(body []byte, t Target) ([]netip.AddrPort, error) {
	var routes []skipperRoute
	if err := json.Unmarshal(body, &routes); err != nil {
		return nil, fmt.Errorf("decode skipper routes (want the JSON list served with Accept: application/json): %w", err)
	}
	var out []netip.AddrPort
	for _, r := range routes {
		if r.Backend == nil || !skipperRouteMatches(r.ID, t) {
			continue
		}
		var eps []string
		switch r.Backend.Type {
		case "network":
			eps = []string{r.Backend.Address}
		case "lb":
			eps = r.Backend.Endpoints
		default: // shunt, loopback, dynamic: nothing routed to a pod
			continue
		}
		for _, ep := range eps {
			ap, err := addrFromURL(ep)
			if err != nil {
				return nil, fmt.Errorf("skipper route %s: %w", r.ID, err)
			}
			out = append(out, ap)
		}
	}
	return dedup(out), nil
}

// addrFromURL reads ip:port out of an endpoint URL such as
// "http://10.2.0.7:8080" or "http://10.2.0.7:8080?zone=eu-1a" (Skipper's
// LBEndpoint.StringWithZone, eskip/eskip.go).
func addrFromURL(s string) (netip.AddrPort, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return netip.AddrPort{}, fmt.Errorf("endpoint %q is not a URL with a host", s)
	}
	return parseHostPort(u.Host, defaultPort(u.Scheme))
}

func defaultPort(scheme string) uint16 {
	switch scheme {
	case "https":
		return 443
	case "http":
		return 80
	}
	return 0
}

// parseHostPort reads "ip:port", "[ip]:port" or a bare ip (then def is the port).
func parseHostPort(s string, def uint16) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return netip.AddrPortFrom(a.Unmap(), def), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not ip:port", s)
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: host is not an IP address", s)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: bad port", s)
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(p)), nil
}

// nginxBackend is one entry of ingress-nginx's GET /configuration/backends on
// its status port: the controller POSTs the list built by configureBackends
// (internal/ingress/controller/nginx.go) from ingress.Backend / ingress.Endpoint
// (pkg/apis/ingress/types.go: name, port, endpoints[].address, endpoints[].port
// as a string), and the Lua handler (rootfs/etc/nginx/lua/configuration.lua)
// serves it back verbatim; the balancer syncs from it every second.
type nginxBackend struct {
	Name      string `json:"name"`
	Endpoints []struct {
		Address string `json:"address"`
		Port    string `json:"port"`
	} `json:"endpoints"`
}

// nginxBackendMatches tells whether a backend is the Target's: ingress-nginx
// names it <namespace>-<service>-<port number or name> (upstreamName in
// internal/ingress/controller/util.go). With no port in the Target, every
// port of the Service matches.
func nginxBackendMatches(name string, t Target) bool {
	prefix := t.Namespace + "-" + t.Service + "-"
	if t.Port != 0 {
		return name == prefix+strconv.Itoa(int(t.Port))
	}
	return strings.HasPrefix(name, prefix) && !strings.Contains(name[len(prefix):], "-")
}

// upstreamsFromNginx reads ingress-nginx's dynamic backends. The controller
// keeps only ready endpoints (getEndpointsFromSlices in
// internal/ingress/controller/endpointslices.go), so a deleted pod leaves the
// list at the first sync after its endpoint turns ready=false.
func upstreamsFromNginx(body []byte, t Target) ([]netip.AddrPort, error) {
	var backends []nginxBackend
	if err := json.Unmarshal(body, &backends); err != nil {
		return nil, fmt.Errorf("decode ingress-nginx /configuration/backends: %w", err)
	}
	var out []netip.AddrPort
	for _, b := range backends {
		if !nginxBackendMatches(b.Name, t) {
			continue
		}
		for _, ep := range b.Endpoints {
			ap, err := parseHostPort(net.JoinHostPort(ep.Address, ep.Port), 0)
			if err != nil {
				return nil, fmt.Errorf("ingress-nginx backend %s: endpoint %s:%s: %w", b.Name, ep.Address, ep.Port, err)
			}
			out = append(out, ap)
		}
	}
	return dedup(out), nil
}

// traefikService is one entry of Traefik's GET /api/http/services:
// serviceRepresentation in pkg/api/handler_http.go wraps runtime.ServiceInfo
// (pkg/config/runtime/runtime_http.go) whose dynamic.Service carries
// loadBalancer.servers[] (dynamic.Server in pkg/config/dynamic/http_config.go:
// url, fenced) next to serverStatus (server URL → "UP"/"DOWN").
// Services of other types (weighted, mirroring, failover) have no
// loadBalancer: they only name other services.
type traefikService struct {
	Name         string `json:"name"`
	LoadBalancer *struct {
		Servers []struct {
			URL    string `json:"url"`
			Fenced bool   `json:"fenced"`
		} `json:"servers"`
	} `json:"loadBalancer"`
	ServerStatus map[string]string `json:"serverStatus"`
}

// Traefik's Kubernetes providers, by the name its API appends to every
// service name after "@" (MakeQualifiedName in pkg/server/provider/provider.go,
// applied in mergeConfiguration, pkg/server/aggregator.go, with the
// ProviderName each provider's Provide sends).
const (
	// Ingress provider: ProviderName "kubernetes" in Provide,
	// pkg/provider/kubernetes/ingress/kubernetes.go.
	traefikProviderIngress = "kubernetes"
	// Gateway API provider: providerName in
	// pkg/provider/kubernetes/gateway/kubernetes.go.
	traefikProviderGateway = "kubernetesgateway"
	// ingress-nginx-compatible provider: providerName in
	// pkg/provider/kubernetes/ingress-nginx/kubernetes.go.
	traefikProviderIngressNGINX = "kubernetesingressnginx"
)

// traefikNormalize is provider.Normalize (pkg/provider/configuration.go):
// every run of non-letters and non-digits becomes one "-".
func traefikNormalize(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(c rune) bool {
		return !unicode.IsLetter(c) && !unicode.IsNumber(c)
	}), "-")
}

// traefikServiceStem is the name a Traefik provider gives the Target's
// service, before "-<port>", or "" when that provider cannot be serving the
// Target:
//
//   - Ingress provider: Normalize(<ns>-<service>-<port>)
//     (loadConfigurationFromIngresses in pkg/provider/kubernetes/ingress/kubernetes.go);
//     it reads Ingresses, so not for a Target reached through an HTTPRoute.
//   - Gateway provider: Normalize(<ns>-<service>-http-<port>), port the
//     backendRef's Service port (loadService in
//     pkg/provider/kubernetes/gateway/httproute.go); the route's own
//     "…-wrr" service only weighs such services and holds no server. It
//     reads routes, so not for a Target reached through an Ingress.
//   - ingress-nginx provider: Normalize(<ns>-<ingress>-<service>-<port>)
//     (loadConfiguration in pkg/provider/kubernetes/ingress-nginx/kubernetes.go),
//     so only with the Ingress's name. Its default backends
//     ("default-backend", "<ns>-<ingress>-default-backend") carry no Service
//     name and are not matched: the probe's Ingress routes its Service by a
//     rule (deploy/base/ingress.yaml).
//
// Both Ingress providers write <port> as the Ingress backend names it, a
// name or a number; the probe's Ingress names it by number.
func traefikServiceStem(provider string, t Target) string {
	switch {
	case provider == traefikProviderIngress && t.Route == "":
		return traefikNormalize(t.Namespace + "-" + t.Service)
	case provider == traefikProviderGateway && t.Ingress == "":
		return traefikNormalize(t.Namespace + "-" + t.Service + "-http")
	case provider == traefikProviderIngressNGINX && t.Ingress != "":
		return traefikNormalize(t.Namespace + "-" + t.Ingress + "-" + t.Service)
	}
	return ""
}

// traefikServiceMatches tells whether a Traefik service is the Target's. The
// name must be exactly the one the provider builds from the Target, with the
// provider's own "@" suffix: a prefix would let a Service "probe-a" claim
// "probe-ab"'s services, and one provider's name can equal another's (the
// Ingress provider's Service "web-http" port 80 and the Gateway provider's
// Service "web" port 80 are both "<ns>-web-http-80"). With no port in the
// Target, any single-word port (a number, or a name without "-") matches.
func traefikServiceMatches(name string, t Target) bool {
	base, provider, ok := strings.Cut(name, "@")
	if !ok {
		return false
	}
	stem := traefikServiceStem(provider, t)
	if stem == "" {
		return false
	}
	if t.Port != 0 {
		return base == stem+"-"+strconv.Itoa(int(t.Port))
	}
	port, ok := strings.CutPrefix(base, stem+"-")
	return ok && port != "" && !strings.Contains(port, "-")
}

// upstreamsFromTraefik reads Traefik's services. What a terminating endpoint
// becomes depends on the provider:
//
//   - Ingress provider: kept while Serving, marked fenced when Terminating
//     (loadService in pkg/provider/kubernetes/ingress/kubernetes.go).
//   - Gateway provider: only Ready endpoints become servers
//     (getBackendAddresses in pkg/provider/kubernetes/gateway/kubernetes.go),
//     so a terminating pod's server is gone at the next configuration.
//   - ingress-nginx provider: kept while Serving; it reads Terminating into
//     backendAddress.Fenced but buildService copies only the URL
//     (pkg/provider/kubernetes/ingress-nginx/kubernetes.go), so a serving
//     terminating pod stays an ordinary server until it stops serving.
//
// The balancers send fenced servers no new requests (the fenced map of each
// balancer under pkg/server/service/loadbalancer: wrr, p2c, hrw, leasttime),
// nor a server a health check marked DOWN. Both, like a missing server,
// count as withdrawn.
func upstreamsFromTraefik(body []byte, t Target) ([]netip.AddrPort, error) {
	var services []traefikService
	if err := json.Unmarshal(body, &services); err != nil {
		return nil, fmt.Errorf("decode traefik /api/http/services: %w", err)
	}
	var out []netip.AddrPort
	for _, s := range services {
		if !traefikServiceMatches(s.Name, t) {
			continue
		}
		ups, err := traefikServers(s)
		if err != nil {
			return nil, err
		}
		out = append(out, ups...)
	}
	return dedup(out), nil
}

// traefikServers are the servers of one service that take new requests.
func traefikServers(s traefikService) ([]netip.AddrPort, error) {
	if s.LoadBalancer == nil {
		return nil, nil
	}
	var out []netip.AddrPort
	for _, srv := range s.LoadBalancer.Servers {
		if srv.Fenced || s.ServerStatus[srv.URL] == "DOWN" {
			continue
		}
		ap, err := addrFromURL(srv.URL)
		if err != nil {
			return nil, fmt.Errorf("traefik service %s: %w", s.Name, err)
		}
		out = append(out, ap)
	}
	return dedup(out), nil
}

// traefikServiceNames are the exact names (with "@provider") under which
// Traefik's Kubernetes providers would serve the Target, one per provider
// that reads the Target's kind of route (traefikServiceStem), or nil when
// the Target has no port number: a name then cannot be built, and the
// observer reads the whole list.
func traefikServiceNames(t Target) []string {
	if t.Port == 0 {
		return nil
	}
	var out []string
	for _, p := range []string{traefikProviderIngress, traefikProviderIngressNGINX, traefikProviderGateway} {
		if stem := traefikServiceStem(p, t); stem != "" {
			out = append(out, stem+"-"+strconv.Itoa(int(t.Port))+"@"+p)
		}
	}
	return out
}

// traefikServicePaths are the API paths of traefikServiceNames: GET
// /api/http/services/{serviceID} (getService in pkg/api/handler_http.go)
// answers one serviceRepresentation, so each poll's cost does not grow
// with the controller's other services. "@" needs no escaping in a path.
func traefikServicePaths(t Target) []string {
	var out []string
	for _, n := range traefikServiceNames(t) {
		out = append(out, "/api/http/services/"+url.PathEscape(n))
	}
	return out
}

// traefikServiceAbsent recognises getService's own 404 for a name it does
// not hold: writeError's {"message":"service not found: <name>"}
// (pkg/api/handler_http.go, pkg/api/handler.go). A 404 without it (a
// wrong --observer-url: mux's "404 page not found") is no answer.
func traefikServiceAbsent(body []byte) bool {
	return bytes.Contains(body, []byte("service not found"))
}

// upstreamsFromTraefikService reads one service of GET
// /api/http/services/{name}, with the rules of upstreamsFromTraefik.
func upstreamsFromTraefikService(body []byte) ([]netip.AddrPort, error) {
	var s traefikService
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("decode traefik /api/http/services/{name}: %w", err)
	}
	return traefikServers(s)
}

// traefikVersion reads Traefik's GET /api/version: the anonymous struct of
// Handler.Append in pkg/version/version.go, whose Version field has no JSON
// tag and so is written "Version". It is what the build linked in
// (-X …/pkg/version.Version): a release's tag without its "v"
// (.goreleaser.yml.tmpl), "dev" for an untagged build.
func traefikVersion(body []byte) (string, error) {
	var v struct {
		Version string `json:"Version"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("decode traefik /api/version: %w", err)
	}
	return v.Version, nil
}

// envoyClusters is Envoy's admin GET /clusters?format=json: the
// envoy.admin.v3.Clusters message (api/envoy/admin/v3/clusters.proto:
// cluster_statuses[].host_statuses[] with address.socket_address and
// health_status), written with proto field names
// (source/server/admin/clusters_handler.cc).
type envoyClusters struct {
	ClusterStatuses []struct {
		Name         string `json:"name"`
		HostStatuses []struct {
			Address struct {
				SocketAddress *struct {
					Address   string `json:"address"`
					PortValue uint16 `json:"port_value"`
				} `json:"socket_address"`
			} `json:"address"`
			HealthStatus envoyHealth `json:"health_status"`
		} `json:"host_statuses"`
	} `json:"cluster_statuses"`
}

// envoyHealth is envoy.admin.v3.HostHealthStatus (clusters.proto); proto3
// JSON leaves out false flags and the UNKNOWN (0) EDS status.
type envoyHealth struct {
	FailedActiveHealthCheck    bool   `json:"failed_active_health_check"`
	FailedOutlierCheck         bool   `json:"failed_outlier_check"`
	PendingDynamicRemoval      bool   `json:"pending_dynamic_removal"`
	PendingActiveHC            bool   `json:"pending_active_hc"`
	ExcludedViaImmediateHCFail bool   `json:"excluded_via_immediate_hc_fail"`
	ActiveHCTimeout            bool   `json:"active_hc_timeout"`
	EDSHealthStatus            string `json:"eds_health_status"`
}

// routable tells whether Envoy picks the host for new requests: EDS status
// HEALTHY, DEGRADED (lower priority, still used) or unset, and no health-check,
// outlier or removal flag. DRAINING (Envoy Gateway's terminating endpoints),
// UNHEALTHY and TIMEOUT are withdrawn; so is pending_dynamic_removal, a host
// EDS already dropped that Envoy keeps only for its health checks.
func (h envoyHealth) routable() bool {
	switch h.EDSHealthStatus {
	case "", "UNKNOWN", "HEALTHY", "DEGRADED":
	default:
		return false
	}
	return !h.FailedActiveHealthCheck && !h.FailedOutlierCheck && !h.PendingDynamicRemoval &&
		!h.PendingActiveHC && !h.ExcludedViaImmediateHCFail && !h.ActiveHCTimeout
}

// EnvoyClusterPattern is the default pattern of the Envoy cluster names that
// belong to a Target: Contour's "<ns>/<service>/<port>/<hash>"
// (Clustername in internal/envoy; Contour shortens names past 60 characters,
// and then --envoy-cluster must name them), Istio's
// "outbound|<port>||<service>.<ns>.svc.<domain>" (its sidecars and its
// Gateway API gateways alike), and, when the Target names an HTTPRoute,
// Envoy Gateway's "httproute/<ns>/<route>/rule/<n>" (irRouteDestinationName
// in internal/gatewayapi of envoyproxy/gateway): Envoy Gateway names
// clusters after route rules, not Services, so a rule with several
// backendRefs lists them all, and for an Ingress it needs --envoy-cluster.
func EnvoyClusterPattern(t Target) *regexp.Regexp {
	port := `[^/|]+`
	if t.Port != 0 {
		port = strconv.Itoa(int(t.Port))
	}
	ns, svc := regexp.QuoteMeta(t.Namespace), regexp.QuoteMeta(t.Service)
	alt := ns + `/` + svc + `/` + port + `(/.*)?` +
		`|outbound\|` + port + `\|[^|]*\|` + svc + `\.` + ns + `\.svc\..*`
	if t.Route != "" {
		alt += `|httproute/` + ns + `/` + regexp.QuoteMeta(t.Route) + `/rule/[0-9]+`
	}
	return regexp.MustCompile(`^(` + alt + `)$`)
}

// upstreamsFromEnvoy reads Envoy's clusters whose names match cluster, keeping
// the routable hosts.
func upstreamsFromEnvoy(body []byte, cluster *regexp.Regexp) ([]netip.AddrPort, error) {
	var cs envoyClusters
	if err := json.Unmarshal(body, &cs); err != nil {
		return nil, fmt.Errorf("decode envoy /clusters?format=json: %w", err)
	}
	var out []netip.AddrPort
	for _, c := range cs.ClusterStatuses {
		if !cluster.MatchString(c.Name) {
			continue
		}
		for _, h := range c.HostStatuses {
			sa := h.Address.SocketAddress
			if sa == nil || !h.HealthStatus.routable() {
				continue
			}
			a, err := netip.ParseAddr(sa.Address)
			if err != nil {
				return nil, fmt.Errorf("envoy cluster %s: host %q: %w", c.Name, sa.Address, err)
			}
			out = append(out, netip.AddrPortFrom(a.Unmap(), sa.PortValue))
		}
	}
	return dedup(out), nil
}

// upstreamsFromLines reads a command's output: one address a line, as
// "ip:port", "[ip]:port", "ip port" (tab- or space-separated, as
// `aws … --output text` prints two columns) or a bare "ip" (port 0: any port
// of that address). Blank lines and lines starting with # are skipped.
func upstreamsFromLines(out []byte) ([]netip.AddrPort, error) {
	var res []netip.AddrPort
	sc := bufio.NewScanner(bytes.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); len(f) == 2 {
			line = net.JoinHostPort(strings.Trim(f[0], "[]"), f[1])
		}
		ap, err := parseHostPort(line, 0)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w (want ip:port, one a line)", n, err)
		}
		res = append(res, ap)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return dedup(res), nil
}

// dedup sorts and removes duplicates.
func dedup(in []netip.AddrPort) []netip.AddrPort {
	slices.SortFunc(in, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(in)
}

// argValue finds a flag's value in a container's command line, in the
// "--name=value", "--name value", "-name=value" or "-name value" forms;
// case-insensitively, since Traefik's CLI flags are.
func argValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		k, v, hasV := strings.Cut(a, "=")
		if !strings.EqualFold(k, name) {
			continue
		}
		if hasV {
			return v, true
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			return args[i+1], true
		}
		return "true", true
	}
	return "", false
}
