package measure

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
)

// Mode is how trials are produced.
type Mode string

// The trial modes.
const (
	// ModeDelete deletes one probe pod at a time (maxUnavailable 1).
	ModeDelete Mode = "delete"
	// ModeRollout restarts the Deployment and counts every replaced pod as
	// a trial; T0 is the watch's first sight of each deletion.
	ModeRollout Mode = "rollout"
)

// Flag names the configuration comes from; Validate's messages name them so a
// user knows what to change.
const (
	FlagTrials       = "trials"
	FlagReplicas     = "replicas"
	FlagMode         = "mode"
	FlagIngressClass = upstream.FlagIngressClass
	FlagHost         = "host"
	FlagURL          = "url"
	FlagObserver     = "observer"
	FlagDNS          = "dns"
	// FlagDNSPublishNotReady sets publishNotReadyAddresses on --dns's
	// headless Service.
	FlagDNSPublishNotReady = "dns-publish-not-ready"
	// FlagGRPCDNSRate adds a gRPC client that resolves --dns's headless
	// Service (grpc-go's dns resolver and round_robin), and
	// FlagGRPCMaxConnectionAge the probe's MaxConnectionAge for it.
	FlagGRPCDNSRate          = "grpc-dns-rate"
	FlagGRPCMaxConnectionAge = "grpc-max-connection-age"
	FlagRate                 = "rate"
	FlagKeepAlive            = "keepalive"
	FlagHold                 = "hold"
	FlagQuietPeriod          = "quiet-period"
	FlagImage                = "image"
	FlagOut                  = "out"
	FlagKeep                 = "keep"
	FlagNamespace            = "namespace"
	FlagGraceMargin          = "grace-margin"
	FlagMaxSkew              = "max-skew-uncertainty"
	FlagSettle               = "settle-timeout"
	FlagPreStop              = "prestop"
	FlagPreStopSleep         = "prestop-sleep"
	FlagExitOnTerm           = "exit-on-sigterm"
	FlagClockOffset          = "probe-clock-offset"
	FlagListenDelay          = "listen-delay"
	FlagReadiness            = "readiness"
	FlagDrain                = "drain"
	FlagDeregDelay           = "deregistration-delay"
	FlagLoadMethod           = "load-method"
	FlagStopOnBlind          = "stop-on-blind-observer"
	// FlagInClusterLoad and FlagInClusterRate set the in-cluster load
	// runners: how many, and each one's requests per second.
	FlagInClusterLoad = "in-cluster-load"
	FlagInClusterRate = "in-cluster-rate"
	// FlagKubeProxyMetrics is kube-proxy's metrics URL.
	FlagKubeProxyMetrics = "kube-proxy-metrics"
	// FlagRoute picks an Ingress or an HTTPRoute; FlagGateway and
	// FlagGatewaySection name the HTTPRoute's parent.
	FlagRoute          = deploy.FlagRoute
	FlagGateway        = deploy.FlagGateway
	FlagGatewaySection = deploy.FlagGatewaySection
)

// Config is one measurement run, typed and validated.
type Config struct {
	// Client talks to the cluster; RESTConfig is what it was built from
	// (port-forwarding observers need it).
	Client     kubernetes.Interface
	RESTConfig *rest.Config
	// Dynamic reads and writes the Gateway API objects of Route
	// RouteHTTPRoute, which have no typed client here; nil means one built
	// from RESTConfig.
	Dynamic dynamic.Interface

	Trials   int
	Replicas int32
	Mode     Mode

	// Route is RouteIngress ("" too) or RouteHTTPRoute: whether the run
	// creates an Ingress of IngressClass or an HTTPRoute attached to
	// Gateway. An HTTPRoute run checks the Gateway before creating anything
	// (CheckGateway), and waits before its first trial until the Gateway's
	// controller has accepted the route and resolved its backend.
	Route   string
	Gateway GatewayRef
	// IngressClass is the class of the Ingress created for the probe ("" for
	// the cluster's default class); Host its rule's host, or the HTTPRoute's
	// hostname.
	IngressClass string
	Host         string
	// URL is the ingress as reachable from where the tool runs; load goes there.
	URL *url.URL

	// Observer is the upstream observer kind ("auto", "skipper", "none", ...).
	Observer string
	// ObserverOptions configure it (URLs, interval, selectors, command).
	ObserverOptions upstream.Options

	// DNS adds a headless Service over the probe pods and times the cluster
	// DNS's answers for its name (--dns): dns_last_present and dns_removed,
	// beside whatever the observer sees. DNSOptions name the servers
	// (--dns-server; none: the kube-dns pods through port-forward), the
	// name (--dns-name; "": the headless Service's name under
	// ClusterDomain) and the interval (--dns-interval; 0: the observer's).
	// Port is set by the run.
	DNS        bool
	DNSOptions upstream.DNSOptions
	// DNSPublishNotReady sets publishNotReadyAddresses on the headless
	// Service (--dns-publish-not-ready): DNS then answers a deleted pod
	// until it is gone, and the trial runs into the hold.
	DNSPublishNotReady bool
	// GRPCDNSRate, when above 0, runs a gRPC client beside the load: calls
	// at this rate to the probe's gRPC port through grpc-go's dns resolver
	// and round_robin, as a gRPC service's clients reach a headless Service
	// (--grpc-dns-rate): here, asking the first --dns-server, when one is
	// given, and in each in-cluster runner (--in-cluster-load), asking the
	// cluster DNS. Each trial records
	// its last call to the deleted pod (grpc_last_routed) and what ended
	// its use of the address (results.GRPCTrial). GRPCMaxConnectionAge is
	// the probe's grpc-go MaxConnectionAge (--grpc-max-connection-age;
	// 0: none, grpc-go's default).
	GRPCDNSRate          float64
	GRPCMaxConnectionAge time.Duration
	// ClusterDomain is the cluster's DNS domain (--cluster-domain); ""
	// means cluster.local, the kubelet's and kubeadm's default.
	ClusterDomain string

	Rate      float64
	KeepAlive bool
	// LoadTimeout bounds one request; LoadMaxConns caps requests in flight
	// (zero: the load package's defaults).
	LoadTimeout  time.Duration
	LoadMaxConns int
	// LoadMethod is GET or POST (see load.Config.Method).
	LoadMethod string

	// Hold bounds how long a deleted probe keeps serving (its --hold); the tool
	// releases it earlier, once its address is gone from every observed
	// upstream list and no traffic reached it for QuietPeriod.
	Hold        time.Duration
	QuietPeriod time.Duration
	// TrialJitter spreads the deletions over the phases of a periodically
	// reprogramming ingress: before each deletion the run pauses for up to
	// this long (see trialPauses). 0 deletes as soon as steady state is
	// back. Delete mode only.
	TrialJitter time.Duration
	// BeforeDelete, when set, is called before each deletion of delete
	// mode, after steady state and the pause, with the run's namespace; an
	// error ends the run. It lets a caller hold a deletion until the
	// cluster is in a state of its choosing (a test: no slice sync
	// pending); the time it takes is not part of any trial.
	BeforeDelete func(ctx context.Context, namespace string) error
	// GraceMargin is added to Hold for the pod's terminationGracePeriodSeconds.
	GraceMargin time.Duration
	// SettleTimeout bounds each wait for steady state.
	SettleTimeout time.Duration
	// MaxSkewUncertainty marks a trial invalid when the probe clock's offset
	// is known less precisely than this.
	MaxSkewUncertainty time.Duration

	Image string
	Keep  bool
	// Namespace, when set, is an existing namespace to run in (the
	// deploy/rbac/namespaced variant): the run creates its Deployment,
	// Service and Ingress there, named epwindow-<run id>, and deletes exactly
	// those at exit, never the namespace. "" creates a namespace
	// epwindow-<run id> and deletes it at exit.
	Namespace string
	// Overlay picks the manifest overlay ("" = by IngressClass); Labels go
	// on every object created.
	Overlay string
	Labels  map[string]string

	// DeregistrationDelay is a load balancer's deregistration delay in
	// front of the pods; it goes into the header, and the recommended
	// preStop must exceed it.
	DeregistrationDelay time.Duration
	// PreStop makes the probe pods carry the preStop httpGet to /prestop;
	// PreStopSleep makes that hook sleep (applying a recommendation).
	PreStop      bool
	PreStopSleep time.Duration
	// ExitOnSigterm runs the probe as the fast-exiting app of the incidents.
	ExitOnSigterm bool
	// ProbeClockOffset is fault injection: every probe reports its clock off
	// by this much (tests of the skew correction).
	ProbeClockOffset time.Duration
	// ProbeListenDelay makes every probe open its listener only this long
	// after it starts (an app loading its configuration first).
	ProbeListenDelay time.Duration
	// NoReadiness drops the probe pods' readiness probe (--readiness=false):
	// with ProbeListenDelay it reproduces a pod routed before it listens.
	NoReadiness bool
	// Drain is the longest request the app must finish after traffic ends;
	// the recommendation adds it to the grace period.
	Drain time.Duration

	// InClusterLoad, when above 0, runs that many load runners in the run's
	// namespace, one per node, each sending InClusterRate requests per
	// second to the probe Service's ClusterIP: the kube-proxy path, timed
	// as cluster_last_routed beside the ingress path.
	InClusterLoad int
	InClusterRate float64

	// KubeProxyMetrics is kube-proxy's metrics URL (--kube-proxy-metrics,
	// e.g. http://NODE:10249/metrics where it binds there); when set, the
	// header records its sync figures (results.KubeProxy).
	KubeProxyMetrics string

	// StopOnBlindObserver stops the run after a trial in which an observed
	// controller replica could not be read; otherwise such trials are
	// marked invalid and the run goes on.
	StopOnBlindObserver bool

	// ToolVersion, ClusterName (the kubeconfig context) and Flags (as given)
	// go into the results header.
	ToolVersion string
	ClusterName string
	Flags       map[string]string

	// Target measures a team's own Deployment in place, with the sidecar as
	// its witness (--target; zero: epwindow's own probe workload).
	Target TargetOptions
	// Streams are the long-lived connections held through --url
	// (--streams; streams.go).
	Streams StreamOptions

	// Clock stamps every tool-clock stage.
	Clock clock.WithTicker
}

// Validate checks the fields and their combinations — everything but the
// cluster client, so it runs before a cluster is contacted; messages name
// the flag to change.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Trials < 1 {
		add("--%s (%d) must be at least 1", FlagTrials, c.Trials)
	}
	if c.Target.on() {
		// The Deployment's own replicas, mode and traffic: its load may be
		// the app's own (--rate 0, no --url).
		errs = append(errs, c.validateTarget()...)
	} else if c.Replicas < 2 {
		add("--%s (%d) must be at least 2: with one replica a deletion leaves nothing to route to", FlagReplicas, c.Replicas)
	}
	switch {
	case c.Target.on():
	case c.Mode == ModeDelete, c.Mode == ModeRollout:
	default:
		add("--%s %q: want %q or %q", FlagMode, c.Mode, ModeDelete, ModeRollout)
	}
	switch {
	case c.Target.on() && c.Rate == 0 && c.URL == nil:
	case c.URL == nil && c.Target.on():
		add("--%s is required with --%s above 0: the team's route as reachable from here (or --%s 0: the app's own traffic only)", FlagURL, FlagRate, FlagRate)
	case c.URL == nil:
		add("--%s is required: the ingress as reachable from here, e.g. http://127.0.0.1:9090", FlagURL)
	case c.URL.Scheme != "http" && c.URL.Scheme != "https" || c.URL.Host == "":
		add("--%s %q: want an http:// or https:// URL with a host", FlagURL, c.URL)
	}
	if !c.DNS && (len(c.DNSOptions.Servers) > 0 || c.DNSOptions.Name != "") {
		add("--%s and --%s need --%s", upstream.FlagDNSServer, upstream.FlagDNSName, FlagDNS)
	}
	if c.DNSPublishNotReady && (!c.DNS || c.DNSOptions.Name != "") {
		add("--%s needs --%s and the run's own headless Service (no --%s)", FlagDNSPublishNotReady, FlagDNS, upstream.FlagDNSName)
	}
	if c.GRPCDNSRate != 0 {
		switch {
		case math.IsNaN(c.GRPCDNSRate) || c.GRPCDNSRate < 0 || c.GRPCDNSRate > load.MaxRate:
			add("--%s (%g) must be above 0 and at most %d calls per second", FlagGRPCDNSRate, c.GRPCDNSRate, load.MaxRate)
		case !c.DNS:
			add("--%s needs --%s: the gRPC client resolves the run's own headless Service", FlagGRPCDNSRate, FlagDNS)
		case c.DNSOptions.Name != "":
			// The client calls the probe's gRPC port at the addresses of
			// the run's own headless Service; --dns-name names another
			// (HAProxy's, from up --haproxy), whose pods the run does not
			// set up for gRPC.
			add("--%s resolves the run's own headless Service, and --%s %s names another: time HAProxy's path with --%s alone, and the gRPC client in a run of its own without it (epwindow measure --%s --%s ADDR --%s %g)",
				FlagGRPCDNSRate, upstream.FlagDNSName, c.DNSOptions.Name, upstream.FlagDNSName, FlagDNS, upstream.FlagDNSServer, FlagGRPCDNSRate, c.GRPCDNSRate)
		case len(c.DNSOptions.Servers) == 0 && c.InClusterLoad == 0:
			add("--%s needs --%s (a gRPC client here, asking that server: the kube-dns pods are reached by port-forward, which grpc-go's resolver cannot use) or --%s (gRPC clients in the runners, asking the cluster DNS)", FlagGRPCDNSRate, upstream.FlagDNSServer, FlagInClusterLoad)
		}
	}
	if c.GRPCMaxConnectionAge < 0 {
		add("--%s (%s) must not be negative", FlagGRPCMaxConnectionAge, c.GRPCMaxConnectionAge)
	} else if c.GRPCMaxConnectionAge > 0 && c.GRPCDNSRate == 0 {
		add("--%s needs --%s: it is the probe's gRPC port's", FlagGRPCMaxConnectionAge, FlagGRPCDNSRate)
	}
	if c.DNSOptions.Interval < 0 {
		add("--%s (%s) must not be negative", upstream.FlagDNSInterval, c.DNSOptions.Interval)
	}
	if m := c.LoadMethod; m != "" && m != "GET" && m != "POST" {
		add("--%s %q: want GET or POST", FlagLoadMethod, m)
	}
	switch {
	case c.Target.on() && c.Rate == 0:
		// The app's own traffic only.
	case c.Rate <= 0:
		add("--%s (%g) must be above 0 requests per second", FlagRate, c.Rate)
	}
	if c.GraceMargin <= 0 {
		add("--%s (%s) must be above 0: the kubelet would kill the probe as its hold ends", FlagGraceMargin, c.GraceMargin)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{FlagHold, c.Hold}, {FlagQuietPeriod, c.QuietPeriod}, {FlagGraceMargin, c.GraceMargin},
		{FlagSettle, c.SettleTimeout}, {FlagTrialJitter, c.TrialJitter}, {FlagMaxSkew, c.MaxSkewUncertainty}, {FlagPreStopSleep, c.PreStopSleep}, {FlagDrain, c.Drain}, {FlagDeregDelay, c.DeregistrationDelay}, {FlagListenDelay, c.ProbeListenDelay}} {
		if d.v < 0 {
			add("--%s (%s) must not be negative", d.flag, d.v)
		}
	}
	if c.QuietPeriod <= 0 {
		add("--%s (%s) must be above 0", FlagQuietPeriod, c.QuietPeriod)
	}
	if c.Hold <= c.QuietPeriod {
		add("--%s (%s) must exceed --%s (%s): the probe must outlive the quiet period", FlagHold, c.Hold, FlagQuietPeriod, c.QuietPeriod)
	}
	if c.PreStopSleep > 0 && !c.PreStop {
		add("--%s needs --%s", FlagPreStopSleep, FlagPreStop)
	}
	if c.PreStopSleep >= c.Hold && c.Hold > 0 {
		add("--%s (%s) must be shorter than --%s (%s)", FlagPreStopSleep, c.PreStopSleep, FlagHold, c.Hold)
	}
	if c.InClusterLoad < 0 {
		add("--%s (%d) must not be negative", FlagInClusterLoad, c.InClusterLoad)
	}
	if c.InClusterLoad > 0 && (math.IsNaN(c.InClusterRate) || c.InClusterRate <= 0 || c.InClusterRate > load.MaxRate) {
		add("--%s (%g) must be above 0 and at most %d requests per second", FlagInClusterRate, c.InClusterRate, load.MaxRate)
	}
	if c.KubeProxyMetrics != "" {
		if u, err := url.Parse(c.KubeProxyMetrics); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("--%s %q: want kube-proxy's metrics URL, e.g. http://127.0.0.1:10249/metrics", FlagKubeProxyMetrics, c.KubeProxyMetrics)
		}
	}
	if c.Image == "" {
		add("--%s must name the probe image", FlagImage)
	}
	gw := c.Gateway
	if c.Target.on() && c.Route == RouteHTTPRoute && gw.Name == "" {
		// --target finds the Gateway as the team's HTTPRoute's parent;
		// --gateway only picks one when the route has several.
		gw = GatewayRef{Namespace: "target", Name: "parent"}
	}
	if err := deploy.ValidateRoute(c.Route, gw, c.IngressClass, c.Overlay); err != nil {
		errs = append(errs, err)
	}
	if c.Namespace != "" {
		if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
			add("--%s %q: not a namespace name: %s", FlagNamespace, c.Namespace, strings.Join(msgs, "; "))
		}
	}
	if c.Streams.N > 0 || c.Streams.Protocol != "" {
		nofile, err := openFileLimit()
		if err == nil {
			err = validateStreams(c.Streams, c.LoadMaxConns, nofile)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return errors.Join(errs...)
}
