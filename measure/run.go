package measure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// probeContainer is the probe's container name in the embedded manifests.
const probeContainer = "probe"

// Sink receives a run's results as they are produced: the header once the
// workload is up, then each trial as it ends (so an interrupted run keeps
// every finished trial).
type Sink interface {
	Header(*results.Header) error
	Trial(*results.Record) error
}

// Progress is what a run reports while it works, for a progress line.
type Progress struct {
	// Phase is "setup", "steady", "trial" or "cleanup".
	Phase  string
	Trial  int
	Trials int
	// Extra is how many trials beyond Trials run to replace trials without
	// a valid window, MaxExtra the most it may reach (ExtraTrialsShare).
	Extra, MaxExtra int
	// Stage is the latest stage seen in the current trial.
	Stage string
	// LastWindow is the previous valid trial's window.
	LastWindow time.Duration
	// Message says what the run waits for, in words.
	Message string
}

// runner is one run's state.
type runner struct {
	cfg     Config
	ns      string
	runID   string
	made    created
	wl      *deploy.Workload
	watch   *watcher
	obs     upstream.Observer
	choice  upstream.Choice
	tracker *upstream.Tracker
	// dns and dnsTracker time the cluster DNS's answers for the headless
	// Service (--dns); nil without.
	dns        upstream.Observer
	dnsTracker *upstream.Tracker
	heartbeat  *heartbeat
	gen        *load.Generator
	// grpcGen is the gRPC DNS client (--grpc-dns-rate; nil without);
	// grpcSteady is set once the runners' gRPC clients called every probe
	// pod (runnersSteady).
	grpcGen    *load.Generator
	grpcSteady bool
	// streams holds --streams streams (nil without).
	streams  *load.StreamHolder
	probes   probeAPI
	progress func(Progress)
	// params rendered wl; runnerDep is the in-cluster runners' Deployment
	// (nil without --in-cluster-load), runners reads them.
	params    deploy.Params
	runnerDep *appsv1.Deployment
	runners   runnerAPI
	// runnerLogs is what runners' stream logs were read so far.
	runnerLogs runnerLogs
	// dynamic creates, reads and deletes the HTTPRoute; gateway is its
	// Gateway as CheckGateway found it (zero with an Ingress).
	dynamic dynamic.Interface
	gateway Gateway
	// deleter sends each trial's DELETE (see newDeleter).
	deleter kubernetes.Interface

	// target is measure --target's Deployment and what routes to it (nil:
	// the probe workload); patched is set while the run's sidecar is in
	// its template; sidecars reads the sidecars through the pod proxy.
	target   *target
	patched  bool
	sidecars probeClient

	pmu  sync.Mutex // rollout trials report concurrently
	last Progress
}

// Run measures cfg.Trials trials and hands each to sink. Whatever happens —
// success, error or ctx cancelled (Ctrl-C) — it deletes what it created
// (its namespace, or with cfg.Namespace its objects there), unless
// cfg.Keep, and it never deletes or changes anything else.
func Run(ctx context.Context, cfg Config, sink Sink, progress func(Progress)) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Client == nil {
		return errors.New("no cluster client: check --kubeconfig / --context")
	}
	if progress == nil {
		progress = func(Progress) {}
	}
	r := &runner{cfg: cfg, progress: progress, runID: newRunID()}
	if r.deleter, err = newDeleter(cfg); err != nil {
		return err
	}
	if cfg.Target.on() {
		v, verr := cfg.Client.Discovery().ServerVersion()
		if verr != nil {
			return fmt.Errorf("reach the API server (check --kubeconfig / --context): %w", verr)
		}
		r.last = Progress{Trials: cfg.Trials}
		return runTarget(ctx, r, sink, v.GitVersion)
	}
	name := "probe"
	r.ns = "epwindow-" + r.runID
	if cfg.Namespace != "" {
		// In a namespace shared with other workloads, the run's objects are
		// named by its id, so they cannot collide with anything there.
		r.ns, name = cfg.Namespace, "epwindow-"+r.runID
	}
	r.last = Progress{Trials: cfg.Trials}
	// Set before anything is created: cleanup releases probes through it,
	// also after a create cut short by Ctrl-C.
	r.probes = probeClient{client: cfg.Client, ns: r.ns, port: deploy.DefaultPort}
	r.runners = probeClient{client: cfg.Client, ns: r.ns, port: deploy.DefaultStatsPort}

	serverVersion := ""
	if v, verr := cfg.Client.Discovery().ServerVersion(); verr == nil {
		serverVersion = v.GitVersion
	} else {
		return fmt.Errorf("reach the API server (check --kubeconfig / --context): %w", verr)
	}

	r.params = deploy.Params{
		Namespace: r.ns, Name: name, Replicas: cfg.Replicas, Image: cfg.Image,
		IngressClass: cfg.IngressClass, Host: cfg.Host, Hold: cfg.Hold, GraceMargin: cfg.GraceMargin,
		Overlay: cfg.Overlay, Labels: cfg.Labels, Route: cfg.Route, Gateway: cfg.Gateway,
		PreStop: cfg.PreStop, PreStopSleep: cfg.PreStopSleep, ExitOnSigterm: cfg.ExitOnSigterm,
		ClockOffset: cfg.ProbeClockOffset, RunID: r.runID,
		ListenDelay: cfg.ProbeListenDelay, NoReadiness: cfg.NoReadiness,
	}
	r.params.Headless, r.params.HeadlessPublishNotReady = cfg.DNS, cfg.DNSPublishNotReady
	r.params.GRPC, r.params.GRPCMaxConnectionAge = cfg.GRPCDNSRate > 0, cfg.GRPCMaxConnectionAge
	if cfg.Streams.N > 0 {
		r.params.StreamDrain = cfg.Streams.Drain.String()
		r.params.H2C = cfg.Streams.Protocol == load.ProtocolGRPC
	}
	wl, err := deploy.Render(r.params)
	if err != nil {
		return fmt.Errorf("render the probe workload: %w", err)
	}
	r.wl = wl

	// The Gateway is read before anything is created: a missing one, or
	// one no controller accepted, fails with nothing to undo.
	obsOpts := cfg.ObserverOptions
	target := upstream.Target{Namespace: r.ns, Service: wl.Service.Name, Port: wl.Service.Spec.Ports[0].Port, Host: cfg.Host}
	if wl.HTTPRoute != nil {
		if r.dynamic = cfg.Dynamic; r.dynamic == nil {
			if cfg.RESTConfig == nil {
				return errors.New("no cluster configuration for the Gateway API's dynamic client: check --kubeconfig / --context")
			}
			if r.dynamic, err = dynamic.NewForConfig(cfg.RESTConfig); err != nil {
				return fmt.Errorf("build the dynamic client for --%s %s: %w", FlagRoute, RouteHTTPRoute, err)
			}
		}
		if r.gateway, err = CheckGateway(ctx, cfg.Client.Discovery(), r.dynamic, cfg.Gateway); err != nil {
			return err
		}
		r.report(Progress{Phase: "setup", Message: r.gateway.String() + " accepted"})
		// Auto picks the observer by the Gateway's controller.
		obsOpts.GatewayClass, obsOpts.GatewayController = r.gateway.Class, r.gateway.Controller
		target.Route = wl.HTTPRoute.GetName()
	} else {
		target.Ingress = wl.Ingress.Name
	}

	// The observer is built before anything is created, so a wrong
	// --observer or an unreachable controller fails with nothing to undo.
	closeObserver, err := r.openObserver(ctx, target, obsOpts)
	if err != nil {
		return err
	}
	defer closeObserver()
	r.report(Progress{Phase: "setup", Message: "observer " + r.choice.String()})
	if cfg.DNS {
		closeDNS, err := r.buildDNS(ctx)
		if err != nil {
			return err
		}
		defer closeDNS()
	}

	if r.ownNamespace() {
		r.report(Progress{Phase: "setup", Message: "creating namespace " + r.ns})
	} else {
		if labels := namespaceLabels(wl.Namespace); labels != "" {
			r.report(Progress{Phase: "setup", Message: "namespace " + r.ns + " is used as it is; the manifests' Namespace would carry " + labels})
		}
		r.report(Progress{Phase: "setup", Message: "creating " + name + " in namespace " + r.ns})
	}
	if err := r.create(ctx); err != nil {
		return errors.Join(err, r.cleanup())
	}
	defer func() {
		if cerr := r.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	// The load, the watches, the heartbeat and the observer run on a
	// context of their own, stopped (and waited for) before the deferred
	// cleanup deletes anything: cleanup is not a trial, and load still
	// hitting pods being deleted, or handlers still stamping their events,
	// would only race it.
	return r.inBackground(ctx, closeObserver, func(ctx context.Context, g *errgroup.Group) error {
		return r.measure(ctx, g, sink, serverVersion)
	})
}

// inBackground runs measure with the run's background loops (started on g)
// on a context of their own, and stops and waits for them, and closes the
// observer, before it returns.
func (r *runner) inBackground(ctx context.Context, closeObserver func() error, measure func(context.Context, *errgroup.Group) error) error {
	mctx, stop := context.WithCancelCause(ctx)
	g, gctx := errgroup.WithContext(mctx)
	runErr := measure(gctx, g)
	cause := context.Cause(gctx)
	stop(errMeasured)
	_ = g.Wait() // the loops end with their context; their errors are secondary
	if r.watch != nil {
		r.watch.wait()
	}
	_ = closeObserver()
	if runErr != nil {
		return errors.Join(runErr, cause)
	}
	return nil
}

// openObserver builds the --observer for target and asks it once (its
// preflight): the caller closes it with the returned function, which may be
// called more than once.
func (r *runner) openObserver(ctx context.Context, target upstream.Target, opts upstream.Options) (func() error, error) {
	cfg := r.cfg
	var err error
	r.obs, r.choice, err = upstream.New(ctx, cfg.Observer, upstream.Deps{Client: cfg.Client, Config: cfg.RESTConfig, Clock: cfg.Clock},
		target, opts)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", FlagObserver, cfg.Observer, err)
	}
	closeObserver := sync.OnceValue(r.obs.Close)
	if err := upstream.Preflight(ctx, r.obs); err != nil {
		_ = closeObserver()
		return nil, fmt.Errorf("--%s %s: %w", FlagObserver, r.choice.Kind, err)
	}
	return closeObserver, nil
}

// errMeasured stops the run's background loops once the trials are done.
var errMeasured = errors.New("measurement over")

func newRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *runner) report(p Progress) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if p.Trials == 0 {
		p.Trials = r.cfg.Trials
	}
	if p.LastWindow == 0 {
		p.LastWindow = r.last.LastWindow
	}
	if p.Trial == 0 {
		p.Trial = r.last.Trial
	}
	if p.Extra == 0 {
		p.Extra, p.MaxExtra = r.last.Extra, r.last.MaxExtra
	}
	r.last = p
	r.progress(p)
}

// grace is the probe pods' terminationGracePeriodSeconds as rendered (the
// preStop sleep, the hold and the margin: deploy.Params.Grace).
func (r *runner) grace() time.Duration {
	if g := r.wl.Deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second // the API default
}

// podSelector is the Deployment's selector, match expressions included (a
// team's Deployment of --target may have them).
func (r *runner) podSelector() labels.Selector {
	sel, err := metav1.LabelSelectorAsSelector(r.wl.Deployment.Spec.Selector)
	if err != nil {
		// The API server validated it; only a hand-made object gets here.
		return labels.SelectorFromSet(r.wl.Deployment.Spec.Selector.MatchLabels)
	}
	return sel
}

// measure starts the watches, the observer and the load, waits for steady
// state and runs the trials.
func (r *runner) measure(ctx context.Context, g *errgroup.Group, sink Sink, serverVersion string) error {
	cfg := r.cfg
	// Load through a Gateway that has not programmed the route only
	// fails; the controller's refusal says why at once.
	if err := r.waitRoute(ctx); err != nil {
		return err
	}
	r.heartbeat = newHeartbeat(cfg.Client, cfg.Clock)
	g.Go(func() error { return r.heartbeat.run(ctx) })
	r.watch = newWatcher(cfg.Client, cfg.Clock, r.ns, r.podSelector(), r.wl.Service.Name)
	if err := r.watch.start(ctx); err != nil {
		return err
	}

	obs, choice := r.obs, r.choice
	r.tracker = upstream.NewTracker(obs, cfg.Clock, 0)
	r.tracker.SetNotify(func(msg string) { r.report(Progress{Phase: "observer", Message: msg}) })
	g.Go(func() error { return r.tracker.Run(ctx) })
	if r.dns != nil {
		r.dnsTracker = upstream.NewTracker(r.dns, cfg.Clock, 0)
		r.dnsTracker.SetNotify(func(msg string) { r.report(Progress{Phase: "observer", Message: msg}) })
		g.Go(func() error { return r.dnsTracker.Run(ctx) })
	}

	gen, err := load.New(load.Config{URL: cfg.URL.String(), Host: cfg.Host, Rate: cfg.Rate, KeepAlive: cfg.KeepAlive,
		Timeout: cfg.LoadTimeout, MaxConns: cfg.LoadMaxConns, Method: cfg.LoadMethod}, cfg.Clock)
	if err != nil {
		return err
	}
	r.gen = gen
	g.Go(func() error { return gen.Run(ctx) })

	if err := r.waitSteady(ctx); err != nil {
		return err
	}
	if cfg.GRPCDNSRate > 0 && len(cfg.DNSOptions.Servers) > 0 {
		if err := r.startGRPC(ctx, g.Go); err != nil {
			return err
		}
	}
	if cfg.Streams.N > 0 {
		if err := r.startStreams(ctx, g.Go); err != nil {
			return err
		}
	}
	h := &results.Header{
		Kind: results.KindHeader, Schema: results.SchemaVersion, ToolVersion: cfg.ToolVersion,
		StartedAt: cfg.Clock.Now(), ServerVersion: serverVersion, Cluster: cfg.ClusterName,
		Ingress: results.Ingress{Class: cfg.IngressClass, Settings: obs.Settings(ctx)},
		Mode:    string(cfg.Mode), Namespace: r.ns, Replicas: int(cfg.Replicas), Rate: cfg.Rate, Keepalive: cfg.KeepAlive,
		DrainNS: int64(cfg.Drain), DeregistrationDelayNS: int64(cfg.DeregistrationDelay), Flags: cfg.Flags, HoldNS: int64(cfg.PreStopSleep + cfg.Hold),
		InClusterLoad: cfg.InClusterLoad, InClusterRate: cfg.InClusterRate,
		Route: results.Route{Kind: results.RouteKindIngress}, GRPCDNS: r.grpcHeader(),
	}
	if r.wl.HTTPRoute != nil {
		h.Route = results.Route{Kind: results.RouteKindHTTPRoute, Gateway: r.gateway.Ref.String(),
			GatewayClass: r.gateway.Class, Controller: r.gateway.Controller}
	}
	version := ""
	if v, ok := obs.(upstream.Versioner); ok {
		version = v.Version(ctx)
	}
	h.Ingress.Controller, h.Ingress.Version, h.Ingress.VersionNote = controllerOf(choice, version)
	if obs.Name() != upstream.KindNone {
		h.Observers = []results.Observer{headerObserver(obs, r.tracker.Stats(), obs.Settings(ctx))}
	}
	if r.dnsTracker != nil {
		h.Observers = append(h.Observers, headerObserver(r.dns, r.dnsTracker.Stats(), r.dns.Settings(ctx)))
	}
	if cfg.KubeProxyMetrics != "" {
		kp := ReadKubeProxy(ctx, &http.Client{Transport: &http.Transport{Proxy: nil}}, cfg.KubeProxyMetrics)
		h.KubeProxy = &kp
		r.report(Progress{Phase: "setup", Message: kubeProxyLine(kp)})
	}
	if err := sink.Header(h); err != nil {
		return fmt.Errorf("write results header: %w", err)
	}

	// Every pod created from here on replaces one a trial deletes.
	if err := r.armStartups(); err != nil {
		return err
	}
	if cfg.Mode == ModeRollout {
		return r.rollouts(ctx, sink)
	}
	return r.deletions(ctx, sink)
}

// newDeleter is the client that sends each trial's DELETE: cfg.Client's
// configuration without client-side rate limiting. T0 is stamped just
// before the call, and client-go's token bucket (QPS 5, burst 10 unless
// the kubeconfig's client says otherwise: rest.Config) would hold the
// request back whenever the run's other calls had used it up, so T0 would
// precede the real DELETE by up to 1/QPS (200 ms) and every stage's offset
// would grow by that much. One DELETE per trial cannot burden the API
// server. Without a RESTConfig (unit tests' fake clients) cfg.Client is
// used as it is.
func newDeleter(cfg Config) (kubernetes.Interface, error) {
	if cfg.RESTConfig == nil {
		return cfg.Client, nil
	}
	rc := rest.CopyConfig(cfg.RESTConfig)
	rc.RateLimiter, rc.QPS = nil, -1 // rest.RESTClientFor: no limiter when QPS < 0
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("client for the trials' DELETE: %w", err)
	}
	return c, nil
}

// controllerOf names the results header's controller: the IngressClass's
// or GatewayClass's controller when one was read, else the one the
// observer reads (an explicit --observer reads no class, and the header
// said only "class skipper"); and its version, or why there is none.
func controllerOf(choice upstream.Choice, version string) (controller, ver, note string) {
	controller = choice.Controller
	if controller == "" {
		controller = upstream.ControllerName(choice.Kind)
	}
	if version == "" && controller != "" {
		note = upstream.VersionNote(choice.Kind)
	}
	return controller, version, note
}

// buildDNS builds the DNS observer of --dns and asks its servers once,
// before anything is created: a wrong --dns-server or a DNS that does not
// answer fails the run with nothing to undo. The returned function closes
// it (its port-forwards).
func (r *runner) buildDNS(ctx context.Context) (func(), error) {
	cfg := r.cfg
	opts := cfg.DNSOptions
	if opts.Name == "" {
		opts.Name = upstream.DNSName(r.wl.Headless.Name, r.ns, cfg.ClusterDomain)
	}
	if opts.Interval == 0 {
		opts.Interval = cfg.ObserverOptions.Interval
	}
	opts.Port = uint16(r.wl.Headless.Spec.Ports[0].TargetPort.IntValue())
	obs, err := upstream.NewDNS(upstream.Deps{Client: cfg.Client, Config: cfg.RESTConfig, Clock: cfg.Clock}, opts)
	if err != nil {
		// Bad input (the error names the flag): the CLI exits 2.
		return nil, &FlagError{Flag: FlagDNS, Err: err}
	}
	if err := upstream.PreflightDNS(ctx, obs); err != nil {
		_ = obs.Close()
		if len(opts.Servers) > 0 {
			return nil, &FlagError{Flag: upstream.FlagDNSServer, Value: strings.Join(opts.Servers, ","), Err: err}
		}
		return nil, fmt.Errorf("--%s: %w", FlagDNS, err)
	}
	r.dns = obs
	where := "the kube-dns pods (" + upstream.DNSNamespace + ", " + upstream.DNSSelector + ")"
	if len(opts.Servers) > 0 {
		where = strings.Join(opts.Servers, ", ")
	}
	r.report(Progress{Phase: "setup", Message: "DNS observer: " + opts.Name + " at " + where})
	return sync.OnceFunc(func() { _ = obs.Close() }), nil
}
