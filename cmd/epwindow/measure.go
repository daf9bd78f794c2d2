package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// Flags of measure that are not measure.Config fields by the same name; the
// observer's are upstream's own names.
const (
	flagObserverURL         = upstream.FlagObserverURL
	flagObserverInterval    = upstream.FlagObserverInterval
	flagControllerSelector  = upstream.FlagControllerSelector
	flagControllerNamespace = upstream.FlagControllerNamespace
	flagControllerPort      = upstream.FlagControllerPort
	flagEnvoyAdminPort      = upstream.FlagEnvoyAdminPort
	flagEnvoyCluster        = upstream.FlagEnvoyCluster
	flagUpstreamsCmd        = upstream.FlagUpstreamsCmd
	flagClusterDomain       = "cluster-domain"
	flagBaseline            = "baseline"
	flagMaxP99              = "max-p99"
	flagMaxRegression       = "max-regression"
	flagLoadMethod          = measure.FlagLoadMethod
	flagLoadTimeout         = "load-timeout"
	flagLoadMaxConns        = "load-max-conns"
)

func measureCommand() *cli.Command {
	return &cli.Command{
		Name:  "measure",
		Usage: "delete probe pods under load and time every stage of the propagation window",
		UsageText: `epwindow measure --url http://ingress.example.internal --host epwindow.example.com --ingress-class nginx

   # the local cluster of "make demo":
   epwindow measure --kubeconfig /tmp/epw/kubeconfig --url http://127.0.0.1:9090 \
       --observer skipper --observer-url http://127.0.0.1:9911/routes --trials 10

   # through a Gateway API implementation: an HTTPRoute on an existing Gateway instead of an Ingress:
   epwindow measure --url http://gateway.example.internal --host epwindow.example.com \
       --route httproute --gateway traefik/traefik-gateway

   # and the ClusterIP path, from one runner pod on each of 2 nodes:
   epwindow measure --url http://127.0.0.1:9090 --in-cluster-load 2 --in-cluster-rate 100

   # from cron, into a history folder that keeps the newest 500 runs of the last 90 days (epwindow history reads it):
   epwindow measure --url http://127.0.0.1:9090 --trials 10 --history /var/lib/epwindow/history --keep-runs 500 --keep-for 2160h`,
		Description: `Creates a namespace epwindow-<id> with a probe Deployment, Service and Ingress (see
"epwindow manifests"), drives load through --url, deletes one probe pod at a time and records when
the API server, the EndpointSlice, the ingress controller and the pod itself saw each stage. Writes
one JSON line per trial to --out as it goes, prints percentiles and the recommended preStop and
terminationGracePeriodSeconds, and deletes the namespace on exit (also on Ctrl-C) unless --keep.

With --in-cluster-load N it also runs N load runners (epwindow load, the probe's image) as a
Deployment in the same namespace, one per node, each sending --in-cluster-rate requests per second
to the probe Service's ClusterIP: the path kube-proxy routes. Each trial then records, per runner,
cluster_last_routed (its last response from the deleted pod, on its clock corrected for skew), and
the report shows the ingress path and the ClusterIP path side by side. The runners stop by
themselves at a deadline past the longest the run can take, should epwindow die.

With --namespace NS it creates no namespace: the Deployment, Service and Ingress go into the existing
NS, named epwindow-<id>, and exactly those are deleted on exit. This is what the Role in
deploy/rbac/namespaced allows (no cluster-wide write access).

With --route httproute it creates a Gateway API HTTPRoute on --gateway NS/NAME instead of the
Ingress. Before creating anything it reads the Gateway and its GatewayClass: a missing Gateway
exits 2, missing Gateway API CRDs or a Gateway no controller accepted exit 4. Before the first
trial it waits (at most --settle-timeout) until the class's controller accepted the route and
resolved its backend, and stops at once, cleaning up, if it refused either.`,
		Flags:  measureFlags(),
		Action: runMeasure,
	}
}

// measureFlags are the cluster flags, the workload flags shared with
// manifests (so manifests prints what measure applies), and measure's own.
func measureFlags() []cli.Flag {
	// Unlike kubectl, no -n does not mean the context's namespace: measure
	// then makes a namespace of its own, the safe default.
	fs := append(kubeFlags("run in this existing namespace (RBAC: deploy/rbac/namespaced) instead of creating epwindow-<id>; only the run's own objects there are created and deleted (default: a new namespace, not the context's)"), workloadFlags()...)
	fs = append(fs,
		wideFlag(),
		&cli.IntFlag{Name: measure.FlagTrials, Value: defaultTrials, Usage: fmt.Sprintf("deletions to time; the largest of %d bounds the p95 at 95%% (the p99 needs 299)", defaultTrials), Category: "Trials"},
		&cli.Float64Flag{Name: flagQuantile, Value: results.DefaultQuantile, Usage: "share of deletions the recommended preStop covers, as an upper confidence bound", Category: "Trials"},
		&cli.Float64Flag{Name: flagConfidence, Value: results.DefaultConfidence, Usage: "confidence of that bound", Category: "Trials"},
		&cli.StringFlag{Name: measure.FlagMode, Value: string(measure.ModeDelete), Usage: "delete: one pod at a time, each waiting for the last to settle; rollout: restart the probe Deployment (as kubectl rollout restart) until --trials pods were replaced, timing each pod the Deployment controller deletes, overlapping as in a real rollout", Category: "Trials"},
		&cli.DurationFlag{Name: flagDeregistrationDelay, Usage: "a load balancer's deregistration delay in front of the pods (e.g. an AWS target group's deregistration_delay.timeout_seconds): the recommended preStop must exceed it; recorded for report", Category: "Trials"},
		&cli.DurationFlag{Name: measure.FlagQuietPeriod, Value: 3 * time.Second, Usage: "no traffic for this long after the address left every upstream list ends a trial", Category: "Trials"},
		&cli.DurationFlag{Name: measure.FlagTrialJitter, Value: 3 * time.Second, Usage: "pause up to this long before each deletion, so deletions meet every phase of an ingress that reprograms periodically (Skipper polls every 3s); 0 = none", Category: "Trials"},
		&cli.DurationFlag{Name: measure.FlagSettle, Value: 3 * time.Minute, Usage: "longest wait for steady state before and between trials", Category: "Trials"},
		&cli.DurationFlag{Name: measure.FlagMaxSkew, Value: 50 * time.Millisecond, Usage: "a trial whose probe clock is known less precisely is marked invalid", Category: "Trials"},
		&cli.DurationFlag{Name: measure.FlagDrain, Value: 0, Usage: "longest request your app serves; added to the recommended grace period", Category: "Trials"},
		&cli.StringFlag{Name: measure.FlagURL, Usage: "the ingress as reachable from here, e.g. http://127.0.0.1:9090 (required; with --target, the team's route, or none with --rate 0)", Category: "Ingress"},
		&cli.StringFlag{Name: measure.FlagTarget, Usage: "measure a team's own Deployment in place, deployment/NAME in --namespace: the epwindow sidecar is patched into its pods (a rollout), one pod at a time is evicted, and the template is rolled back at the end; see docs/sidecar.md", Category: "Target"},
		&cli.IntSliceFlag{Name: measure.FlagPort, Usage: "with --target: the app's port the sidecar watches (repeatable; default: the pod template's TCP container ports)", Category: "Target"},
		&cli.DurationFlag{Name: measure.FlagEvictionWait, Value: measure.DefaultEvictionWait, Usage: "with --target: how long one pod's eviction may stay refused by a PodDisruptionBudget before the run ends", Category: "Target"},
		&cli.StringFlag{Name: measure.FlagObserver, Value: upstream.KindAuto, Usage: "upstream observer: auto, skipper, nginx, traefik, envoy, haproxy, cmd, none; dns is --dns with no other observer", Category: "Observer"},
		&cli.StringSliceFlag{Name: flagObserverURL, Usage: "read the controller at this URL instead of port-forwarding to its pods (repeat per replica)", Category: "Observer"},
		&cli.DurationFlag{Name: flagObserverInterval, Value: 500 * time.Millisecond, Usage: "observer poll interval: the resolution of upstream_removed", Category: "Observer"},
		&cli.StringFlag{Name: flagControllerSelector, Usage: "label selector of the ingress controller pods", Category: "Observer"},
		&cli.StringFlag{Name: flagControllerNamespace, Usage: "namespace of the ingress controller pods (default: all)", Category: "Observer"},
		&cli.IntFlag{Name: flagControllerPort, Usage: "in-pod port of the controller's status/API endpoint (default: the controller's)", Category: "Observer"},
		&cli.IntFlag{Name: flagEnvoyAdminPort, Usage: "Envoy admin port in the proxy pods", Category: "Observer"},
		&cli.StringFlag{Name: flagEnvoyCluster, Usage: "regular expression of the Envoy cluster names of the probe Service", Category: "Observer"},
		&cli.BoolFlag{Name: measure.FlagStopOnBlind, Usage: "stop the run when an observed controller replica cannot be read (default: mark those trials invalid and go on)", Category: "Observer"},
		&cli.StringFlag{Name: upstream.FlagHAProxyBackend, Usage: "backend whose servers --observer haproxy reads from the stats socket (--observer-url unix:///path or tcp://host:port; default: every backend)", Category: "Observer"},
		&cli.StringFlag{Name: flagUpstreamsCmd, Usage: "command printing the upstream addresses (ip:port), one per line, for --observer cmd", Category: "Observer"},
		&cli.BoolFlag{Name: measure.FlagDNS, Usage: "also create a headless Service over the probe pods and time the cluster DNS's answers for it (dns_removed); see docs/dns.md", Category: "DNS"},
		&cli.StringSliceFlag{Name: upstream.FlagDNSServer, Usage: "DNS server to ask (host[:port], udp:// or tcp://; repeat per server); default: the kube-dns pods in kube-system through port-forward", Category: "DNS"},
		&cli.StringFlag{Name: upstream.FlagDNSName, Usage: "name to resolve (default: the headless Service's, <name>-headless.<namespace>.svc.<cluster-domain>)", Category: "DNS"},
		&cli.DurationFlag{Name: upstream.FlagDNSInterval, Usage: "DNS poll interval: the resolution of dns_removed (default: --observer-interval)", Category: "DNS"},
		&cli.BoolFlag{Name: measure.FlagDNSPublishNotReady, Usage: "set publishNotReadyAddresses on the headless Service, as lint's EPW012 warns against: DNS then answers a deleted pod until it is gone (the trials run into --hold)", Category: "DNS"},
		&cli.Float64Flag{Name: measure.FlagGRPCDNSRate, Usage: "also run a gRPC client here that resolves the headless Service with grpc-go's dns resolver (asking the first --dns-server) and round_robin, this many calls per second, and record its last call to each deleted pod (grpc_last_routed) and what ended it; needs the pods' addresses reachable from here (0: none)", Category: "DNS"},
		&cli.DurationFlag{Name: measure.FlagGRPCMaxConnectionAge, Usage: "grpc-go MaxConnectionAge of the probe's gRPC port (--grpc-dns-rate): GOAWAY to each client connection at this age, so the client re-resolves (0: none)", Category: "DNS"},
		&cli.StringFlag{Name: flagClusterDomain, Value: "cluster.local", Usage: "the cluster's DNS domain (the kubelet's --cluster-domain)", Category: "DNS"},
		&cli.Float64Flag{Name: measure.FlagRate, Value: 50, Usage: "load in requests per second through --url", Category: "Load"},
		&cli.BoolFlag{Name: measure.FlagKeepAlive, Usage: "reuse connections (default: a new connection per request, as most 502 reports involve)", Category: "Load"},
		&cli.IntFlag{Name: measure.FlagInClusterLoad, Usage: "also run this many load runners in the run's namespace, one per node, sending to the probe Service's ClusterIP (the kube-proxy path), timed as cluster_last_routed beside the ingress path; 0 = none", Category: "Load"},
		&cli.Float64Flag{Name: measure.FlagInClusterRate, Value: 50, Usage: fmt.Sprintf("requests per second of each in-cluster runner (at most %d)", load.MaxRate), Category: "Load"},
		&cli.StringFlag{Name: measure.FlagKubeProxyMetrics, Usage: "kube-proxy's metrics URL (its --metrics-bind-address, /metrics); when reachable, the results header records its sync duration and network-programming figures", Category: "Load"},
		&cli.IntFlag{Name: measure.FlagStreams, Usage: "long-lived streams to hold open through --url (needs --stream-protocol); see docs/streams.md", Category: "Streams"},
		&cli.StringFlag{Name: measure.FlagStreamProtocol, Usage: "websocket or grpc (gRPC over h2c)", Category: "Streams"},
		&cli.StringFlag{Name: measure.FlagStreamDrain, Value: "none", Usage: "how the probe ends its streams: none, close, close-jittered=DUR, goaway", Category: "Streams"},
		&cli.StringFlag{Name: measure.FlagReconnect, Value: load.ReconnectGRPCDefault, Usage: "clients' re-open policy: grpc-default (1s×1.6, ±20%, ≤120s), immediate, DUR±JITTER", Category: "Streams"},
		&cli.StringFlag{Name: flagLoadMethod, Value: "GET", Usage: "GET, or POST: ingress controllers retry a refused GET on another pod but never a request with a body, so POST shows the 502s of non-idempotent APIs", Category: "Load"},
		&cli.DurationFlag{Name: flagLoadTimeout, Value: 5 * time.Second, Usage: "timeout of one load request", Category: "Load"},
		&cli.IntFlag{Name: flagLoadMaxConns, Usage: "most load requests in flight; more are counted as dropped (default: rate × timeout)", Category: "Load"},
		&cli.StringFlag{Name: measure.FlagOut, Usage: "results file, JSON lines written as trials end (default epwindow-<time>.jsonl)", Category: "Output"},
		&cli.BoolFlag{Name: measure.FlagKeep, Usage: "leave what the run created (its namespace, or its objects in --namespace) for inspection", Category: "Output"},
	)
	fs = append(fs, historyFlags()...)
	return append(fs,
		&cli.StringFlag{Name: flagBaseline, Usage: "results file of an earlier run to compare with (thresholds apply to the change)", Category: "Gate"},
		&cli.StringSliceFlag{Name: flagMaxP99, Usage: "fail (exit 3) when a stage's p99 exceeds a bound, e.g. window=3s (repeatable)", Category: "Gate"},
		&cli.StringFlag{Name: flagMaxRegression, Usage: "fail (exit 3) when a quantile judged worse than --baseline grew by more, e.g. 20%", Category: "Gate"},
	)
}

// defaultTrials is the least n whose maximum bounds the default quantile at
// the default confidence (results.TrialsNeeded(0.95, 0.95) = 59): a default
// run makes a true claim about 95% of deletions.
const defaultTrials = 59

// measureConfig turns flags into a typed, validated measure.Config.
func measureConfig(c *cli.Context) (measure.Config, error) {
	// The workload flags are read as manifests reads them; --target renders
	// no probe workload, so only the flags are read (cfg.Validate checks
	// what applies to it).
	read := workloadParams
	if c.String(measure.FlagTarget) != "" {
		read = workloadFlagsRead
	}
	wp, err := read(c, "epwindow", "probe")
	if err != nil {
		return measure.Config{}, err
	}
	cfg := measure.Config{
		Trials:              c.Int(measure.FlagTrials),
		Replicas:            wp.Replicas,
		Mode:                measure.Mode(c.String(measure.FlagMode)),
		IngressClass:        wp.IngressClass,
		Host:                wp.Host,
		Observer:            c.String(measure.FlagObserver),
		Rate:                c.Float64(measure.FlagRate),
		KeepAlive:           c.Bool(measure.FlagKeepAlive),
		LoadTimeout:         c.Duration(flagLoadTimeout),
		LoadMaxConns:        c.Int(flagLoadMaxConns),
		LoadMethod:          c.String(flagLoadMethod),
		Hold:                wp.Hold,
		QuietPeriod:         c.Duration(measure.FlagQuietPeriod),
		TrialJitter:         c.Duration(measure.FlagTrialJitter),
		GraceMargin:         wp.GraceMargin,
		SettleTimeout:       c.Duration(measure.FlagSettle),
		MaxSkewUncertainty:  c.Duration(measure.FlagMaxSkew),
		Drain:               c.Duration(measure.FlagDrain),
		DeregistrationDelay: c.Duration(flagDeregistrationDelay),
		Image:               wp.Image,
		Keep:                c.Bool(measure.FlagKeep),
		Namespace:           c.String(measure.FlagNamespace),
		PreStop:             wp.PreStop,
		PreStopSleep:        wp.PreStopSleep,
		ExitOnSigterm:       wp.ExitOnSigterm,
		ProbeClockOffset:    wp.ClockOffset,
		ProbeListenDelay:    wp.ListenDelay,
		NoReadiness:         wp.NoReadiness,
		Overlay:             wp.Overlay,
		Route:               wp.Route,
		Gateway:             wp.Gateway,
		Labels:              wp.Labels,
		StopOnBlindObserver: c.Bool(measure.FlagStopOnBlind),
		InClusterLoad:       c.Int(measure.FlagInClusterLoad),
		InClusterRate:       c.Float64(measure.FlagInClusterRate),
		KubeProxyMetrics:    c.String(measure.FlagKubeProxyMetrics),
		DNS:                 c.Bool(measure.FlagDNS),
		DNSOptions: upstream.DNSOptions{
			Servers:  c.StringSlice(upstream.FlagDNSServer),
			Name:     c.String(upstream.FlagDNSName),
			Interval: c.Duration(upstream.FlagDNSInterval),
		},
		ClusterDomain:        c.String(flagClusterDomain),
		DNSPublishNotReady:   c.Bool(measure.FlagDNSPublishNotReady),
		GRPCDNSRate:          c.Float64(measure.FlagGRPCDNSRate),
		GRPCMaxConnectionAge: c.Duration(measure.FlagGRPCMaxConnectionAge),
		ObserverOptions: upstream.Options{
			Interval:            c.Duration(flagObserverInterval),
			URLs:                c.StringSlice(flagObserverURL),
			IngressClass:        c.String(measure.FlagIngressClass),
			ControllerSelector:  c.String(flagControllerSelector),
			ControllerNamespace: c.String(flagControllerNamespace),
			ControllerPort:      c.Int(flagControllerPort),
			EnvoyAdminPort:      c.Int(flagEnvoyAdminPort),
			EnvoyCluster:        c.String(flagEnvoyCluster),
			Command:             c.String(flagUpstreamsCmd),
			HAProxyBackend:      c.String(upstream.FlagHAProxyBackend),
		},
		ToolVersion: version,
		Flags:       givenFlags(c),
		Clock:       clock.RealClock{},
	}
	if s := c.String(measure.FlagTarget); s != "" {
		if cfg.Target.Deployment, err = measure.ParseTarget(s); err != nil {
			return cfg, err
		}
		for _, p := range c.IntSlice(measure.FlagPort) {
			cfg.Target.Ports = append(cfg.Target.Ports, int32(p))
		}
		cfg.Target.EvictionWait = c.Duration(measure.FlagEvictionWait)
		cfg.Mode = measure.ModeEvict
		// The probe workload's default host is not the team's: the run
		// takes the host of the Ingress rule that routes to it.
		if !c.IsSet(measure.FlagHost) {
			cfg.Host = ""
		}
	} else if c.IsSet(measure.FlagPort) || c.IsSet(measure.FlagEvictionWait) {
		return cfg, fmt.Errorf("--%s and --%s need --%s deployment/NAME", measure.FlagPort, measure.FlagEvictionWait, measure.FlagTarget)
	}
	if cfg.Observer == upstream.KindDNS {
		// The DNS answer is the only consumer observed: no ingress
		// controller is read.
		cfg.Observer, cfg.DNS = upstream.KindNone, true
	}
	if cfg.Streams, err = streamOptions(c); err != nil {
		return cfg, err
	}
	if s := c.String(measure.FlagURL); s != "" {
		u, err := url.Parse(s)
		if err != nil {
			return cfg, fmt.Errorf("--%s %q: %w", measure.FlagURL, s, err)
		}
		cfg.URL = u
	}
	if c.Duration(flagObserverInterval) <= 0 {
		return cfg, fmt.Errorf("--%s (%s) must be above 0", flagObserverInterval, c.Duration(flagObserverInterval))
	}
	// Validate everything before touching a cluster.
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// givenFlags records the flags set on the command line, for the results
// header; kubeconfig paths are left out (they name local files only), and
// so is --token (a secret).
func givenFlags(c *cli.Context) map[string]string {
	m := map[string]string{}
	for _, name := range c.FlagNames() {
		if !c.IsSet(name) || name == flagKubeconfig || name == flagToken {
			continue
		}
		if v := c.Generic(name); v != nil {
			m[name] = fmt.Sprint(v)
		} else {
			m[name] = c.String(name)
		}
	}
	return m
}

func runMeasure(c *cli.Context) error {
	cfg, err := measureConfig(c)
	if err != nil {
		return cli.Exit("epwindow measure: "+err.Error(), exitUsage)
	}
	opts, err := measureOptions(c)
	if err != nil {
		return cli.Exit("epwindow measure: "+err.Error(), exitUsage)
	}
	thresholds, baseline, err := gateConfig(c)
	if err != nil {
		return cli.Exit("epwindow measure: "+err.Error(), exitUsage)
	}
	hist, err := historyConfig(c)
	if err != nil {
		return cli.Exit("epwindow measure: "+err.Error(), exitUsage)
	}
	kc, err := kube(c)
	if err != nil {
		return cli.Exit("epwindow measure: "+err.Error(), kubeExitCode(err))
	}
	// Every client measure builds from here on is counted (footprint).
	api := &apiCounter{}
	kc.config.Wrap(api.wrap)
	if kc.client, err = kubernetes.NewForConfig(kc.config); err != nil {
		return cli.Exit("epwindow measure: build client: "+err.Error(), exitCluster)
	}
	cfg.Client, cfg.RESTConfig, cfg.ClusterName = kc.client, kc.config, kc.context
	if cfg.Route == measure.RouteHTTPRoute {
		// The Gateway API has no typed client here.
		if cfg.Dynamic, err = dynamic.NewForConfig(kc.config); err != nil {
			return cli.Exit("epwindow measure: build the dynamic client for the Gateway API: "+err.Error(), exitCluster)
		}
	}
	if code, err := preflight(c.Context, cfg); err != nil {
		if c.Context.Err() != nil {
			// Ctrl-C cut a check short: not the check's failure.
			return cli.Exit("epwindow measure: interrupted during the preflight; nothing was created", exitInterrupted)
		}
		return cli.Exit("epwindow measure: "+err.Error(), code)
	}

	sink, outPath, err := openSink(c, hist, opts, cfg.PreStopSleep+cfg.Hold)
	if err != nil {
		return cli.Exit("epwindow measure: "+err.Error(), exitUsage)
	}
	defer sink.close()
	prog := newProgress(c.App.ErrWriter, cfg.Trials)
	started := time.Now()
	runErr := measure.Run(c.Context, cfg, sink, prog.update)
	prog.done()
	cost := api.cost(time.Since(started))
	footprint(c.App.ErrWriter, cost, len(sink.trials))

	// Whatever happened, the finished trials are on disk; summarise them.
	saved := fmt.Sprintf("%d finished trials in %s", len(sink.trials), outPath)
	if sink.header == nil {
		// Stopped before steady state: nothing was written, and an empty
		// file is no results file (results.Decode rejects it); leave none.
		if sink.close() == nil {
			if err := os.Remove(outPath); err == nil || errors.Is(err, os.ErrNotExist) {
				saved = "no trial finished; no results file written"
			}
		}
	}
	if sink.header != nil {
		sum := results.NewSummary(sink.header, opts)
		for _, r := range sink.trials {
			sum.Add(r)
		}
		if runErr != nil {
			sum.MarkInterrupted()
		}
		sum.Close()
		doc := sum.Doc()
		doc.Cost = &cost
		if err := sink.w.WriteSummary(doc); err != nil {
			runErr = errors.Join(runErr, err)
		}
		fmt.Fprintln(c.App.Writer)
		if err := results.NewTextReporterWidth(sum, textWidth(c, c.App.Writer))(c.App.Writer); err != nil {
			return cli.Exit("epwindow measure: render report: "+err.Error(), exitFailure)
		}
		fmt.Fprintf(c.App.Writer, "\nresults: %s  (epwindow report --format markdown %s)\n", outPath, outPath)
		printHints(c.App.ErrWriter, "measure", textWidth(c, c.App.ErrWriter), sum)
		if runErr == nil {
			if code, err := gate(c.App.Writer, textWidth(c, c.App.Writer), sum, thresholds, baseline); err != nil {
				return cli.Exit("epwindow measure: "+err.Error(), code)
			}
			if r := sum.Doc().Recommendation; r.LowerBound() {
				if sink.header != nil && sink.header.Target != nil {
					// A team's app (--target) has no hold: it stopped
					// listening while still routed to.
					return cli.Exit(fmt.Sprintf("epwindow measure: %s stopped listening while still routed to, so the recommendation is only a lower bound (preStop ≥ %ds): give it a preStop (e.g. lifecycle.preStop.sleep) of at least that and measure again",
						sink.header.Target, r.PreStopSeconds), exitLowerBound)
				}
				return cli.Exit(fmt.Sprintf("epwindow measure: the recommendation is only a lower bound (preStop ≥ %ds): rerun with a longer --%s", r.PreStopSeconds, measure.FlagHold), exitLowerBound)
			}
		}
	}
	var flagErr *measure.FlagError
	var clusterErr *measure.ClusterError
	if msg, ok := fullVolume(runErr, outPath, sink.header != nil, len(sink.trials)); ok {
		return cli.Exit("epwindow measure: "+msg, exitFailure)
	}
	switch {
	case runErr == nil:
		return nil
	case errors.As(runErr, &flagErr):
		// Found only in the cluster (a runner the scheduler cannot place):
		// bad input all the same, and everything was cleaned up.
		return cli.Exit("epwindow measure: "+runErr.Error(), exitUsage)
	case errors.As(runErr, &clusterErr):
		// The Gateway changed between the preflight and the run's own
		// check: unusable all the same, and nothing was created.
		return cli.Exit("epwindow measure: "+runErr.Error(), exitCluster)
	case c.Context.Err() != nil:
		// SIGINT/SIGTERM (signal.NotifyContext in main) cancelled the run.
		return cli.Exit("epwindow measure: interrupted; cleaned up; "+saved, exitInterrupted)
	case apierrors.IsForbidden(runErr):
		return cli.Exit("epwindow measure: "+runErr.Error(), exitForbidden)
	default:
		return cli.Exit("epwindow measure: "+runErr.Error(), exitFailure)
	}
}

// measureOptions reads measure's --quantile and --confidence.
func measureOptions(c *cli.Context) (results.Options, error) {
	q, conf := c.Float64(flagQuantile), c.Float64(flagConfidence)
	if err := errors.Join(fraction(flagQuantile, q), fraction(flagConfidence, conf)); err != nil {
		return results.Options{}, err
	}
	return results.Options{Quantile: q, Confidence: conf}, nil
}

// fileSink writes each record as it comes and keeps the trials for the
// final summary.
type fileSink struct {
	w *results.Writer
	// open, when w is nil, creates the file as the header comes.
	open   func() (*results.Writer, error)
	f      *os.File
	opts   results.Options
	hold   time.Duration
	header *results.Header
	trials []*results.Record
}

// Header writes the run's header with the recommendation settings and the
// hold, so that a report of the file bounds what the run was asked for and
// knows where its trials were cut.
func (s *fileSink) Header(h *results.Header) error {
	h.Quantile, h.Confidence = s.opts.Quantile, s.opts.Confidence
	if h.HoldNS == 0 {
		h.HoldNS = int64(s.hold)
	}
	if s.w == nil {
		w, err := s.open()
		if err != nil {
			return err
		}
		s.w = w
	}
	// Only a header on disk makes a results file: one a full volume
	// refused is removed, not left empty.
	if err := s.w.WriteHeader(h); err != nil {
		return err
	}
	s.header = h
	return nil
}

func (s *fileSink) Trial(r *results.Record) error {
	s.trials = append(s.trials, r)
	return s.w.WriteTrial(r)
}

// progress prints one line per change of phase or trial stage: redrawn in
// place on a terminal, appended otherwise (CI logs).
type progress struct {
	w      io.Writer
	tty    bool
	trials int
	last   string
}

func newProgress(w io.Writer, trials int) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty, trials: trials}
}

func (p *progress) update(u measure.Progress) {
	line := progressLine(u)
	if line == p.last {
		return
	}
	p.last = line
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) done() {
	if p.tty && p.last != "" {
		fmt.Fprintln(p.w)
	}
}

// progressLine renders e.g. "[#####.....] 5/10 trial: slice_not_ready  last window 3.21s".
func progressLine(u measure.Progress) string {
	const width = 20
	done := u.Trial - 1
	if u.Phase != "trial" && u.Trial > 0 {
		done = u.Trial
	}
	total := u.Trials + u.Extra
	done = max(0, min(done, total))
	bar := ""
	if total > 0 {
		n := done * width / total
		bar = "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "] " + fmt.Sprintf("%d/%d ", done, total)
		if u.Extra > 0 {
			// Trials beyond --trials replace ones without a valid window.
			bar += fmt.Sprintf("(+%d/≤%d: too few valid) ", u.Extra, u.MaxExtra)
		}
	}
	s := bar + u.Phase
	if u.Stage != "" {
		s += ": " + u.Stage
	}
	if u.Message != "" {
		s += " — " + u.Message
	}
	if u.LastWindow > 0 {
		s += fmt.Sprintf("  last window %s", u.LastWindow.Round(time.Millisecond))
	}
	return s
}
