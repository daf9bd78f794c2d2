package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Observer kinds, the values of --observer.
const (
	KindAuto    = "auto"
	KindSkipper = "skipper"
	KindNginx   = "nginx"
	KindTraefik = "traefik"
	KindEnvoy   = "envoy"
	KindCmd     = "cmd"
	KindNone    = "none"
)

// Kinds lists every --observer value.
var Kinds = []string{KindAuto, KindSkipper, KindNginx, KindTraefik, KindEnvoy, KindHAProxy, KindCmd, KindNone}

// Flag names of the observer settings; errors name them so a user knows what
// to change. The measure command registers them.
const (
	FlagObserver            = "observer"
	FlagObserverURL         = "observer-url"
	FlagObserverInterval    = "observer-interval"
	FlagControllerSelector  = "controller-selector"
	FlagControllerNamespace = "controller-namespace"
	FlagControllerPort      = "controller-port"
	FlagEnvoyAdminPort      = "envoy-admin-port"
	FlagEnvoyCluster        = "envoy-cluster"
	FlagUpstreamsCmd        = "upstreams-cmd"
	FlagIngressClass        = "ingress-class"
)

// Controller names of IngressClass spec.controller that auto recognises.
const (
	ControllerNginx        = "k8s.io/ingress-nginx"
	ControllerTraefik      = "traefik.io/ingress-controller"
	ControllerContourPref  = "projectcontour.io/"
	ControllerEnvoyGateway = "gateway.envoyproxy.io"
	ControllerSkipper      = "zalando.org/skipper"
)

// Controller names of GatewayClass spec.controllerName that auto recognises
// (Envoy Gateway's "gateway.envoyproxy.io/gatewayclass-controller" is
// recognised by ControllerEnvoyGateway, Contour's by ControllerContourPref).
const (
	// ControllerTraefikGateway: controllerName in
	// pkg/provider/kubernetes/gateway/kubernetes.go of traefik/traefik.
	ControllerTraefikGateway = "traefik.io/gateway-controller"
	// ControllerIstioGateway is Istio's default controllerName
	// (PILOT_GATEWAY_API_CONTROLLER_NAME, pilot/pkg/features in istio/istio).
	ControllerIstioGateway = "istio.io/gateway-controller"
	// ControllerCiliumGateway is Cilium's controllerName (controllerName in
	// operator/pkg/gateway-api of cilium/cilium).
	ControllerCiliumGateway = "io.cilium/gateway-controller"
)

// DefaultInterval is the poll interval when Options.Interval is zero.
const DefaultInterval = time.Second

// Deps are what observers need from the caller.
type Deps struct {
	// Client reads IngressClasses and controller pods.
	Client kubernetes.Interface
	// Config is what Client was built from: port-forwarding needs it.
	Config *rest.Config
	// Clock stamps every reading (the tool's clock); nil means the real clock.
	Clock clock.PassiveClock
	// HTTP reads controller endpoints; nil means a client without proxy
	// whose timeout is the poll timeout.
	HTTP *http.Client
}

// Options are the observer settings from the command line.
type Options struct {
	// Interval is the poll interval, and so each observer's resolution
	// (--observer-interval); zero means DefaultInterval.
	Interval time.Duration
	// Timeout bounds one poll (an HTTP read or one run of the command);
	// zero means Interval, at least 1 s.
	Timeout time.Duration
	// URLs, one per controller replica, are read directly instead of
	// port-forwarding to pods (--observer-url): Skipper's routes URL
	// (http://host:9911/routes), Traefik's API, Envoy's admin, ingress-nginx's
	// status port. A URL with no path gets the observer's default path.
	URLs []string
	// IngressClass names the class whose controller auto picks an observer
	// by (--ingress-class); empty means the Target Ingress's class, else the
	// cluster's default class.
	IngressClass string
	// GatewayClass is the GatewayClass of the Gateway the probe's HTTPRoute
	// attaches to (measure --route httproute); "" when the Target is reached
	// through an Ingress.
	GatewayClass string
	// GatewayController is that GatewayClass's spec.controllerName. When it
	// is set, auto picks the observer by it instead of by an IngressClass.
	GatewayController string
	// ControllerSelector and ControllerNamespace find the controller pods
	// (--controller-selector, --controller-namespace; "" = all namespaces).
	// Empty selector: the controller's usual Helm labels.
	ControllerSelector  string
	ControllerNamespace string
	// ControllerPort is the in-pod port to read (--controller-port); zero
	// means the controller's default (ingress-nginx 10246, Traefik 8080,
	// Skipper 9911).
	ControllerPort int
	// EnvoyAdminPort is Envoy's in-pod admin port (--envoy-admin-port); zero
	// means Contour's 9001 or Envoy Gateway's 19000 when auto knows which.
	EnvoyAdminPort int
	// EnvoyCluster is a regular expression for the Envoy cluster names of the
	// Target (--envoy-cluster); empty means EnvoyClusterPattern.
	EnvoyCluster string
	// Command prints the upstream addresses, one a line (--upstreams-cmd).
	Command string
	// HAProxyBackend is the backend whose servers the haproxy observer
	// reads (--haproxy-backend); "" reads every backend.
	HAProxyBackend string
}

// Choice says which observer was built and why.
type Choice struct {
	Kind string
	// Controller is the IngressClass's spec.controller, or the
	// GatewayClass's spec.controllerName, when one was read.
	Controller string
	Reason     string
}

// String reads like "nginx (IngressClass nginx: controller k8s.io/ingress-nginx)"
// or "traefik (GatewayClass traefik: controller traefik.io/gateway-controller)".
func (c Choice) String() string { return c.Kind + " (" + c.Reason + ")" }

// ControllerName names the controller that an observer of this kind reads
// ("skipper", "ingress-nginx", "traefik", "envoy"), for the results header
// when no IngressClass or GatewayClass named it (an explicit --observer
// reads no class); "" for cmd and none, which read no controller.
func ControllerName(kind string) string {
	switch kind {
	case KindSkipper:
		return "skipper"
	case KindNginx:
		return "ingress-nginx"
	case KindTraefik:
		return "traefik"
	case KindEnvoy:
		return "envoy"
	case KindHAProxy:
		return "haproxy"
	}
	return ""
}

// VersionNote says why the results header has no version for an observer
// of this kind that reported none: Skipper exposes none (its support
// listener serves /routes, /metrics and /debug/pprof only, skipper.go;
// the version is only printed by `skipper -version`, cmd/skipper/main.go),
// so without an image tag it is "not exposed"; the others expose one this
// observer did not read ("not read"). "" for cmd and none.
func VersionNote(kind string) string {
	switch kind {
	case KindSkipper:
		return "not exposed"
	case KindNginx, KindTraefik, KindEnvoy, KindHAProxy:
		return "not read"
	}
	return ""
}

// kindForController maps an IngressClass controller name to an observer kind.
func kindForController(controller string) (string, bool) {
	switch {
	case controller == ControllerNginx:
		return KindNginx, true
	case controller == ControllerTraefik:
		return KindTraefik, true
	case strings.HasPrefix(controller, ControllerContourPref),
		strings.HasPrefix(controller, ControllerEnvoyGateway):
		return KindEnvoy, true
	case controller == ControllerSkipper, strings.Contains(strings.ToLower(controller), "skipper"):
		return KindSkipper, true
	}
	return "", false
}

// gatewayChoice picks the observer for a GatewayClass's controller. Cilium's
// Envoy serves its admin API only on a unix socket
// (/var/run/cilium/envoy-admin.sock, as cilium-bugtool reads it), which a
// port-forward cannot reach: it is observed only at a URL that exposes it.
func gatewayChoice(class, controller string, haveURLs bool) Choice {
	c := Choice{Kind: KindNone, Controller: controller}
	why := fmt.Sprintf("GatewayClass %s: controller %s", class, controller)
	switch {
	case controller == ControllerTraefikGateway:
		c.Kind = KindTraefik
	case controller == ControllerIstioGateway,
		strings.HasPrefix(controller, ControllerEnvoyGateway),
		strings.HasPrefix(controller, ControllerContourPref):
		c.Kind = KindEnvoy
	case controller == ControllerCiliumGateway && haveURLs:
		c.Kind = KindEnvoy
		why += " (cilium-envoy's admin at --" + FlagObserverURL + "; --" + FlagEnvoyCluster + " names Cilium's clusters)"
	case controller == ControllerCiliumGateway:
		why += fmt.Sprintf(": cilium-envoy serves its admin API on a unix socket, which a port-forward cannot reach; expose it and pass --%s %s --%s URL, or use --%s %s --%s '…'",
			FlagObserver, KindEnvoy, FlagObserverURL, FlagObserver, KindCmd, FlagUpstreamsCmd)
	default:
		why += fmt.Sprintf(" has no observer here; upstream stages need --%s %s --%s '…'", FlagObserver, KindCmd, FlagUpstreamsCmd)
	}
	c.Reason = why
	return c
}

// New builds the observer of the given kind for t. For KindAuto it picks by
// the GatewayClass's controller when Options.GatewayController is set, else
// it reads the IngressClass (Options.IngressClass, else the Ingress's class,
// else the default class) and picks by its controller; Choice says what was
// picked and why. Observers that port-forward keep their forwards until Close.
func New(ctx context.Context, kind string, deps Deps, t Target, opts Options) (Observer, Choice, error) {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = max(opts.Interval, time.Second)
	}
	if deps.HTTP == nil {
		deps.HTTP = &http.Client{Timeout: opts.Timeout, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}
	}
	choice := Choice{Kind: kind, Reason: "--" + FlagObserver + " " + kind}
	if kind == "" {
		kind = KindAuto
	}
	// Envoy's defaults depend on which controller runs it, so the class is
	// read for envoy too (best effort there).
	envoyDefaults := kind == KindEnvoy && (opts.EnvoyAdminPort == 0 || opts.ControllerSelector == "") && len(opts.URLs) == 0
	if kind == KindAuto || envoyDefaults {
		// A route's GatewayClass was read by the caller; an Ingress's class
		// is looked up here.
		var class, controller string
		var err error
		if opts.GatewayController != "" {
			class, controller = opts.GatewayClass, opts.GatewayController
		} else {
			class, controller, err = ingressController(ctx, deps.Client, t, opts.IngressClass)
		}
		switch {
		case kind == KindEnvoy:
			choice.Controller = controller
		case opts.Command != "":
			choice = Choice{Kind: KindCmd, Controller: controller, Reason: "--" + FlagUpstreamsCmd + " is set"}
		case err != nil:
			return nil, choice, fmt.Errorf("--%s auto: %w (or name the observer with --%s)", FlagObserver, err, FlagObserver)
		case opts.GatewayController != "":
			choice = gatewayChoice(class, controller, len(opts.URLs) > 0)
		default:
			k, ok := kindForController(controller)
			if !ok {
				k = KindNone
				choice.Reason = fmt.Sprintf("IngressClass %s: controller %s has no observer here; upstream stages need --%s %s --%s '…'",
					class, controller, FlagObserver, KindCmd, FlagUpstreamsCmd)
			} else {
				choice.Reason = fmt.Sprintf("IngressClass %s: controller %s", class, controller)
			}
			choice.Kind, choice.Controller = k, controller
		}
	}
	obs, err := build(choice, deps, t, opts)
	return obs, choice, err
}

func build(choice Choice, deps Deps, t Target, opts Options) (Observer, error) {
	h := &httpObserver{kind: choice.Kind, client: deps.HTTP, interval: opts.Interval, timeout: opts.Timeout, clock: deps.Clock}
	pods := &podSource{portFlag: FlagControllerPort}
	switch choice.Kind {
	case KindNone:
		return noneObserver{}, nil
	case KindCmd:
		if strings.TrimSpace(opts.Command) == "" {
			return nil, fmt.Errorf("--%s %s needs --%s: a command printing the upstream addresses, one ip:port a line", FlagObserver, KindCmd, FlagUpstreamsCmd)
		}
		return &cmdObserver{command: opts.Command, timeout: opts.Timeout, interval: opts.Interval, clock: deps.Clock}, nil
	case KindHAProxy:
		return newHAProxy(deps, opts, opts.HAProxyBackend)
	case KindSkipper:
		// limit: the table is served in pages of 1024 by default
		// (defaultRouteListingLimit in routing/routing.go). Skipper's
		// /routes (Routing.ServeHTTP there) knows offset, limit, nopretty
		// and timestamp, but no filter by route or backend, and pages in
		// table order, so the Target's routes can be anywhere: the whole
		// table is read, within the body budget (maxBody) and the poll
		// timeout, and each poll's size and time are measured (PollStats).
		h.path, h.accept = "/routes?limit=1000000", "application/json"
		h.parse = func(b []byte) ([]netip.AddrPort, error) { return upstreamsFromSkipper(b, t) }
		h.settings = func(a [][]string) map[string]string {
			return settingsFromArgs(a, "source-poll-timeout", "source-poll-timeout", "3000")
		}
		pods.selector, pods.port, pods.container = "application=skipper-ingress", 9911, "skipper"
	case KindNginx:
		h.path = "/configuration/backends"
		h.parse = func(b []byte) ([]netip.AddrPort, error) { return upstreamsFromNginx(b, t) }
		h.settings = func(a [][]string) map[string]string {
			return settingsFromArgs(a, "sync-rate-limit", "sync-rate-limit", "0.3")
		}
		pods.selector, pods.port, pods.container = "app.kubernetes.io/name=ingress-nginx,app.kubernetes.io/component=controller", 10246, "controller"
	case KindTraefik:
		// The Target's services by exact name when it has a port; else the
		// list (per_page: the API pages by 100, defaultPerPage in
		// pkg/api/criterion.go), each poll as big as the whole table.
		h.path = "/api/http/services?per_page=100000"
		h.parse = func(b []byte) ([]netip.AddrPort, error) { return upstreamsFromTraefik(b, t) }
		h.named, h.parseOne, h.absent = traefikServicePaths(t), upstreamsFromTraefikService, traefikServiceAbsent
		h.settings = func(a [][]string) map[string]string {
			return settingsFromArgs(a, "providersThrottleDuration", "providers.providersThrottleDuration", "2s")
		}
		pods.selector, pods.port, pods.container = "app.kubernetes.io/name=traefik", 8080, "traefik"
		// Read when no image tag tells the version, as with --observer-url.
		h.versionPath, h.versionOf = "/api/version", traefikVersion
	case KindEnvoy:
		re := EnvoyClusterPattern(t)
		if opts.EnvoyCluster != "" {
			var err error
			if re, err = regexp.Compile(opts.EnvoyCluster); err != nil {
				return nil, fmt.Errorf("--%s %q: %w", FlagEnvoyCluster, opts.EnvoyCluster, err)
			}
		}
		h.path = "/clusters?format=json"
		h.parse = func(b []byte) ([]netip.AddrPort, error) { return upstreamsFromEnvoy(b, re) }
		pods.portFlag = FlagEnvoyAdminPort
		switch {
		case strings.HasPrefix(choice.Controller, ControllerContourPref):
			// Contour's Envoy: admin on 127.0.0.1:9001 (read-only subset).
			pods.selector, pods.port, pods.container = "app.kubernetes.io/component=envoy", 9001, "envoy"
		case strings.HasPrefix(choice.Controller, ControllerEnvoyGateway):
			// Envoy Gateway's proxies: admin on 127.0.0.1:19000.
			pods.selector, pods.port, pods.container = "app.kubernetes.io/component=proxy,app.kubernetes.io/managed-by=envoy-gateway", 19000, "envoy"
		case choice.Controller == ControllerIstioGateway:
			// Istio's Gateway API gateways: the pods it deploys per Gateway
			// carry these labels (kube-gateway.yaml under
			// manifests/charts/istio-control/istio-discovery/files), and
			// Envoy's admin listens on 127.0.0.1:15000 in istio-proxy. Every
			// Gateway of the class is read, since which one serves the route
			// is not known here; with several, --controller-selector
			// gateway.networking.k8s.io/gateway-name=<gateway> narrows it.
			pods.selector, pods.port, pods.container = "gateway.istio.io/managed=istio.io-gateway-controller", 15000, "istio-proxy"
			if opts.GatewayClass != "" {
				pods.selector += ",gateway.networking.k8s.io/gateway-class-name=" + opts.GatewayClass
			}
		}
		if opts.EnvoyAdminPort != 0 {
			pods.port = opts.EnvoyAdminPort
		}
	default:
		return nil, fmt.Errorf("--%s %q: want one of %s", FlagObserver, choice.Kind, strings.Join(Kinds, ", "))
	}
	if len(opts.URLs) > 0 {
		h.src = urlSource(opts.URLs)
		return h, nil
	}
	if opts.ControllerSelector != "" {
		pods.selector = opts.ControllerSelector
	}
	if opts.ControllerPort != 0 && choice.Kind != KindEnvoy {
		pods.port = opts.ControllerPort
	}
	if pods.selector == "" || pods.port == 0 {
		return nil, fmt.Errorf("--%s %s: which pods run Envoy and where is its admin? set --%s and --%s (or --%s to its admin URL)",
			FlagObserver, choice.Kind, FlagControllerSelector, FlagEnvoyAdminPort, FlagObserverURL)
	}
	if _, err := labels.Parse(pods.selector); err != nil {
		return nil, fmt.Errorf("--%s %q: %w", FlagControllerSelector, pods.selector, err)
	}
	if deps.Client == nil || deps.Config == nil {
		return nil, errors.New("port-forwarding observers need a cluster client and its REST config")
	}
	pods.client, pods.config, pods.namespace = deps.Client, deps.Config, opts.ControllerNamespace
	pods.refresh = max(10*opts.Interval, 10*time.Second)
	pods.now = deps.Clock.Now
	h.src = pods
	return h, nil
}

// ingressController finds the IngressClass that governs t and its
// spec.controller.
func ingressController(ctx context.Context, c kubernetes.Interface, t Target, class string) (string, string, error) {
	if c == nil {
		return "", "", errors.New("no cluster client to read the IngressClass")
	}
	if class == "" && t.Ingress != "" {
		ing, err := c.NetworkingV1().Ingresses(t.Namespace).Get(ctx, t.Ingress, metav1.GetOptions{})
		switch {
		case err == nil && ing.Spec.IngressClassName != nil:
			class = *ing.Spec.IngressClassName
		case err == nil:
			class = ing.Annotations["kubernetes.io/ingress.class"]
		case !apierrors.IsNotFound(err):
			return "", "", fmt.Errorf("get ingress %s/%s: %w (needs RBAC: get ingresses in namespace %s)", t.Namespace, t.Ingress, err, t.Namespace)
		}
	}
	if class != "" {
		ic, err := c.NetworkingV1().IngressClasses().Get(ctx, class, metav1.GetOptions{})
		if err != nil {
			return class, "", fmt.Errorf("get ingressclass %s: %w (needs RBAC: get ingressclasses, cluster-wide; or set --%s)", class, err, FlagIngressClass)
		}
		return class, ic.Spec.Controller, nil
	}
	list, err := c.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", fmt.Errorf("list ingressclasses: %w (needs RBAC: list ingressclasses, cluster-wide; or set --%s)", err, FlagIngressClass)
	}
	var defaults []networkingv1.IngressClass
	for _, ic := range list.Items {
		if ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true" {
			defaults = append(defaults, ic)
		}
	}
	switch {
	case len(defaults) == 1:
		return defaults[0].Name, defaults[0].Spec.Controller, nil
	case len(list.Items) == 1:
		return list.Items[0].Name, list.Items[0].Spec.Controller, nil
	}
	return "", "", fmt.Errorf("%d IngressClasses and %d marked default: set --%s", len(list.Items), len(defaults), FlagIngressClass)
}

// Preflight checks, before a run creates anything, that obs has something
// to read: an observer that port-forwards to controller pods must find at
// least one running. Without it a run would wait out its settle timeout
// for a table no one serves. Other observers pass.
func Preflight(ctx context.Context, obs Observer) error {
	h, ok := obs.(*httpObserver)
	if !ok {
		return nil
	}
	src, ok := h.src.(*podSource)
	if !ok {
		return nil
	}
	if _, err := src.list(ctx); err != nil {
		return fmt.Errorf("%w; or set --%s to the controller's own URL", err, FlagObserverURL)
	}
	return nil
}
