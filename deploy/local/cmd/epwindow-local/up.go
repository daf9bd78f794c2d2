package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/epwindow/epwindow/deploy/local/controlplane"
	"github.com/epwindow/epwindow/deploy/local/coredns"
	"github.com/epwindow/epwindow/deploy/local/kubeproxy"
	"github.com/epwindow/epwindow/deploy/local/nodeagent"
	"github.com/epwindow/epwindow/deploy/local/skipper"
	"github.com/epwindow/epwindow/deploy/local/traefik"

	"github.com/epwindow/epwindow/internal/localcluster/flock"
)

// Flag names of `up`.
const (
	flagDir            = "dir"
	flagNodes          = "nodes"
	flagBatchPeriod    = "batch-period"
	flagIngressPoll    = "ingress-poll"
	flagBinDir         = "bin-dir"
	flagCNIBinDir      = "cni-bin-dir"
	flagProxyMode      = "proxy-mode"
	flagProxySync      = "proxy-min-sync-period"
	flagIngress        = "ingress"
	flagThrottle       = "traefik-throttle"
	flagMaxPerSlice    = "max-endpoints-per-slice"
	flagBallast        = "ballast"
	flagChurn          = "churn"
	flagDNS            = "dns"
	flagDNSTTL         = "dns-ttl"
	flagDNSCache       = "dns-cache"
	flagDNSCacheAll    = "dns-cache-cluster"
	flagHAProxy        = "haproxy"
	flagHAProxyResolve = "haproxy-resolve"
	flagVolumes        = "volumes"
)

// maxChurn bounds --churn: more slice writes a second than this machine's
// control plane should be asked to absorb next to a measurement.
const maxChurn = 100

// The data planes `up --ingress` runs.
const (
	ingressSkipper = "skipper"
	ingressTraefik = "traefik"
	ingressAll     = "all"
)

// upConfig is `up`'s flags, typed.
type upConfig struct {
	Dir         string        // absolute; created if missing
	Nodes       int           // node names: node-0 … node-(N-1)
	BatchPeriod time.Duration // --endpointslice-updates-batch-period
	IngressPoll time.Duration // Skipper's -source-poll-timeout
	BinDir      string        // skipper and the containers' binaries
	CNIBinDir   string        // the CNI plugins bridge, host-local, loopback
	ProxyMode   string        // kube-proxy's mode, or none
	ProxySync   time.Duration // kube-proxy's minSyncPeriod (0: its default)
	Ingress     string        // skipper, traefik or all
	Throttle    time.Duration // Traefik's providersThrottleDuration
	MaxPerSlice int           // --max-endpoints-per-slice (0: the default, 100)
	Ballast     ballastSpec   // extra Services (zero: none)
	Churn       float64       // ballast endpoint changes a second (0: none)
	// DNS runs CoreDNS behind kube-system/kube-dns (10.96.0.10) and gives
	// ClusterFirst pods that resolver; DNSTTL is its records' TTL, DNSCache
	// its cache's cap, DNSCacheCluster whether cluster names are cached.
	DNS             bool
	DNSTTL          time.Duration
	DNSCache        time.Duration
	DNSCacheCluster bool
	// HAProxy runs Debian's HAProxy resolving a headless Service over the
	// probe pods through CoreDNS (needs DNS); HAProxyResolve is its
	// `timeout resolve`.
	HAProxy        bool
	HAProxyResolve time.Duration
	// Volumes is how many hostPath PersistentVolumes to create.
	Volumes int
}

func (c upConfig) skipper() bool { return c.Ingress != ingressTraefik }
func (c upConfig) traefik() bool { return c.Ingress != ingressSkipper }

// upFlags defines up's flags on a new FlagSet, parsed into c, --ballast's
// text into ballast (parseUp reads it). The one list of the flags: parseUp
// parses with it and upHelp prints it, so the help cannot go stale.
func upFlags(c *upConfig, ballast *string) *flag.FlagSet {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Dir, flagDir, "", "directory for kubeconfigs, credentials, etcd data and logs (required)")
	fs.IntVar(&c.Nodes, flagNodes, 2, "number of nodes the node agent registers")
	fs.DurationVar(&c.BatchPeriod, flagBatchPeriod, 0, "EndpointSlice controller's --endpointslice-updates-batch-period")
	fs.DurationVar(&c.IngressPoll, flagIngressPoll, 3*time.Second, "Skipper's poll interval of the API server (-source-poll-timeout)")
	fs.StringVar(&c.BinDir, flagBinDir, "", "directory holding skipper and the binaries containers run (default: this executable's directory)")
	fs.StringVar(&c.CNIBinDir, flagCNIBinDir, nodeagent.DefaultCNIBinDir, "directory holding the CNI plugins bridge, host-local and loopback (make deps installs them)")
	fs.StringVar(&c.ProxyMode, flagProxyMode, kubeproxy.ModeNFTables, "kube-proxy's mode: nftables, iptables, or none (no kube-proxy: ClusterIPs do not route)")
	fs.DurationVar(&c.ProxySync, flagProxySync, 0, "kube-proxy's minSyncPeriod, the least time between two syncs of its rules (0: kube-proxy's default, 1s)")
	fs.StringVar(&c.Ingress, flagIngress, ingressSkipper, "the data planes to run: skipper, traefik (its Ingress, Gateway API and ingress-nginx providers) or all")
	fs.DurationVar(&c.Throttle, flagThrottle, 2*time.Second, "Traefik's providersThrottleDuration: the least time between two configurations a provider hands to the router (0: none)")
	fs.IntVar(&c.MaxPerSlice, flagMaxPerSlice, 0, "kube-controller-manager's --max-endpoints-per-slice, 1 to 1000 (0: its default, 100)")
	fs.BoolVar(&c.DNS, flagDNS, false, "run CoreDNS as the cluster DNS (kube-system/kube-dns at 10.96.0.10; needs kube-proxy and bin/coredns): pods resolve Service names")
	fs.DurationVar(&c.DNSTTL, flagDNSTTL, 30*time.Second, "CoreDNS's TTL on the cluster's records (kubernetes plugin ttl; kubeadm's 30s)")
	fs.DurationVar(&c.DNSCache, flagDNSCache, 30*time.Second, "CoreDNS's cache cap (cache plugin; kubeadm's 30s)")
	fs.BoolVar(&c.HAProxy, flagHAProxy, false, "run Debian's HAProxy (make deps) resolving the headless Service "+haproxyNamespace+"/"+haproxyService+" over the probe pods through CoreDNS (needs --dns): a DNS client to measure with --observer haproxy")
	fs.DurationVar(&c.HAProxyResolve, flagHAProxyResolve, time.Second, "HAProxy's timeout resolve: how often it asks CoreDNS again (HAProxy's default 1s)")
	fs.BoolVar(&c.DNSCacheCluster, flagDNSCacheAll, false, "let CoreDNS cache the cluster domain's answers too (kubeadm's Corefile does not)")
	fs.IntVar(&c.Volumes, flagVolumes, 2, "hostPath PersistentVolumes (10Gi, no storage class) for claims to bind to, under DIR/volumes, removed at teardown")
	fs.StringVar(ballast, flagBallast, "", "add `SERVICES[xENDPOINTS]`: SERVICES extra selector-less Services, each with ENDPOINTS (default 5) addresses no pod holds and an Ingress of the running class")
	fs.Float64Var(&c.Churn, flagChurn, 0, "ballast endpoint readiness changes a second, written steadily while the cluster runs (needs --ballast)")
	return fs
}

// parseUp turns up's arguments into a validated upConfig; --help (or -h)
// is flag.ErrHelp.
func parseUp(args []string) (upConfig, error) {
	var c upConfig
	var ballast string
	fs := upFlags(&c, &ballast)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.Ballast, err = parseBallast(ballast); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("find this executable's directory (set --%s): %w", flagBinDir, err)
		}
		c.BinDir = filepath.Dir(exe)
	}
	return c, c.validate()
}

func (c *upConfig) validate() error {
	if c.Dir == "" {
		return fmt.Errorf("--%s is required", flagDir)
	}
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return fmt.Errorf("--%s %q: %w", flagDir, c.Dir, err)
	}
	c.Dir = abs
	if c.BinDir, err = filepath.Abs(c.BinDir); err != nil {
		return fmt.Errorf("--%s: %w", flagBinDir, err)
	}
	if c.Nodes < 0 || c.Nodes > 250 {
		return fmt.Errorf("--%s (%d) must be between 0 and 250", flagNodes, c.Nodes)
	}
	if c.BatchPeriod < 0 {
		return fmt.Errorf("--%s (%s) must not be negative", flagBatchPeriod, c.BatchPeriod)
	}
	if c.IngressPoll < 10*time.Millisecond {
		return fmt.Errorf("--%s (%s) must be at least 10ms", flagIngressPoll, c.IngressPoll)
	}
	switch c.ProxyMode {
	case kubeproxy.ModeNFTables, kubeproxy.ModeIPTables, kubeproxy.ModeNone:
	default:
		return fmt.Errorf("--%s %q: want %s, %s or %s", flagProxyMode, c.ProxyMode, kubeproxy.ModeNFTables, kubeproxy.ModeIPTables, kubeproxy.ModeNone)
	}
	if c.ProxySync < 0 {
		return fmt.Errorf("--%s (%s) must not be negative", flagProxySync, c.ProxySync)
	}
	if c.ProxySync > 0 && c.ProxyMode == kubeproxy.ModeNone {
		return fmt.Errorf("--%s needs a kube-proxy: --%s is none", flagProxySync, flagProxyMode)
	}
	switch c.Ingress {
	case ingressSkipper, ingressTraefik, ingressAll:
	default:
		return fmt.Errorf("--%s %q: want %s, %s or %s", flagIngress, c.Ingress, ingressSkipper, ingressTraefik, ingressAll)
	}
	if c.Throttle < 0 {
		return fmt.Errorf("--%s (%s) must not be negative", flagThrottle, c.Throttle)
	}
	if c.MaxPerSlice < 0 || c.MaxPerSlice > 1000 {
		return fmt.Errorf("--%s (%d) must be between 1 and 1000 (0: the default, 100)", flagMaxPerSlice, c.MaxPerSlice)
	}
	if c.Churn < 0 || c.Churn > maxChurn {
		return fmt.Errorf("--%s (%g) must be between 0 and %d changes a second", flagChurn, c.Churn, maxChurn)
	}
	if c.Churn > 0 && c.Ballast.Services == 0 {
		return fmt.Errorf("--%s needs --%s: it changes the ballast's endpoints", flagChurn, flagBallast)
	}
	if c.DNS && c.ProxyMode == kubeproxy.ModeNone {
		return fmt.Errorf("--%s needs a kube-proxy to route the kube-dns ClusterIP: --%s is none", flagDNS, flagProxyMode)
	}
	if c.HAProxy && !c.DNS {
		return fmt.Errorf("--%s needs --%s: HAProxy resolves the headless Service through CoreDNS", flagHAProxy, flagDNS)
	}
	if c.HAProxyResolve < time.Millisecond || c.HAProxyResolve > time.Hour {
		return fmt.Errorf("--%s (%s) must be between 1ms and 1h", flagHAProxyResolve, c.HAProxyResolve)
	}
	if c.DNSTTL < 0 || c.DNSTTL > time.Hour {
		return fmt.Errorf("--%s (%s) must be between 0 and 1h", flagDNSTTL, c.DNSTTL)
	}
	if c.DNSCache < 0 || c.DNSCache > time.Hour {
		return fmt.Errorf("--%s (%s) must be between 0 and 1h", flagDNSCache, c.DNSCache)
	}
	if c.Volumes < 0 || c.Volumes > 100 {
		return fmt.Errorf("--%s (%d) must be between 0 and 100", flagVolumes, c.Volumes)
	}
	if c.ProxyMode != kubeproxy.ModeNone && c.Nodes == 0 {
		return fmt.Errorf("--%s %s needs at least one node (--%s)", flagProxyMode, c.ProxyMode, flagNodes)
	}
	return nil
}

// ownedPaths are what `up` creates under DIR besides logs. They are removed
// before a start (a crashed run's leftovers) and after teardown; nothing
// else in DIR is touched.
var ownedPaths = []string{"etcd", "pki", "kubeconfig", "kubeconfig-restricted", "kubeconfig-coredns", "Corefile", "nodes", "haproxy.cfg", "haproxy.sock", volumesDir}

// logFiles are the per-component logs under DIR. A start truncates them;
// teardown leaves them for reading.
var logFiles = []string{"epwindow-local.log", "etcd.log", "apiserver.log", "controller-manager.log", "scheduler.log", "nodeagent.log", "skipper.log", "kube-proxy.log", "traefik.log", "coredns.log", "haproxy.log"}

func removeOwned(dir string, withLogs bool) error {
	var errs []error
	names := ownedPaths
	if withLogs {
		names = append(append([]string(nil), ownedPaths...), logFiles...)
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// machineLock is held by the one running `up` on this machine: clusters
// share the pod network (10.244.0.0/16, the bridge, the unreachable route),
// and a start cleans up what a crashed run left, which must never be what a
// live run is using.
const machineLock = "/run/epwindow-local.lock"

func lockMachine(ctx context.Context, stderr io.Writer) (*os.File, error) {
	return flock.Acquire(ctx, machineLock, func() {
		fmt.Fprintf(stderr, "waiting for another epwindow-local up on this machine to stop (%s is locked)\n", machineLock)
	})
}

// up runs the cluster until ctx ends or a component fails, then tears it
// all down. It returns nil after a teardown caused by ctx (a signal).
func up(ctx context.Context, cfg upConfig, stdout io.Writer) (retErr error) {
	lock, err := lockMachine(ctx, os.Stderr)
	if err != nil {
		return err
	}
	defer lock.Close()
	// Startup is timed from here: waiting for another run is not startup.
	start := time.Now()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("create --%s: %w", flagDir, err)
	}
	if err := removeOwned(cfg.Dir, true); err != nil {
		return fmt.Errorf("remove the state of an earlier run in %s: %w", cfg.Dir, err)
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, "epwindow-local.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	log := slog.New(slog.NewTextHandler(logf, nil))
	defer func() {
		if err := removeOwned(cfg.Dir, false); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("remove state files: %w", err))
		}
		log.Info("torn down", "error", retErr)
		if ctx.Err() != nil {
			// Interrupted (even while starting): a clean teardown is success.
			retErr = nil
		}
	}()
	if err := cleanupStale(ctx); err != nil {
		return err
	}

	cp, err := controlplane.Start(ctx, controlplane.Config{Dir: cfg.Dir, BatchPeriod: cfg.BatchPeriod, MaxEndpointsPerSlice: cfg.MaxPerSlice})
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	defer cp.Stop()
	log.Info("control plane ready", "url", cp.URL, "after", time.Since(start))
	if err := createVolumes(ctx, cp.Client, cfg.Dir, cfg.Volumes); err != nil {
		return err
	}

	nodes, err := startNodes(ctx, cfg, cp, log)
	if err != nil {
		return fmt.Errorf("node agent: %w", err)
	}
	defer nodes.Stop()
	log.Info("nodes ready", "nodes", cfg.Nodes, "after", time.Since(start))

	var proxyDone <-chan struct{} // nil, never ready, without kube-proxy
	var proxyMetrics string
	if cfg.ProxyMode != kubeproxy.ModeNone {
		kp, stop, err := startServices(ctx, cfg, cp, nodes)
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil {
				retErr = errors.Join(retErr, err)
			}
		}()
		proxyDone, proxyMetrics = kp.Done(), kp.MetricsURL
		log.Info("kube-proxy ready", "mode", cfg.ProxyMode, "pid", kp.PID(), "metrics", kp.MetricsURL, "after", time.Since(start))
	}

	ready := []string{"kubeconfig=" + cp.Kubeconfig}
	if proxyMetrics != "" {
		ready = append(ready, "kube-proxy-metrics="+proxyMetrics)
	}
	var dnsDone, haproxyDone <-chan struct{} // nil, never ready, without --dns / --haproxy
	var dnsErr, haproxyErr func() error
	if cfg.DNS {
		host, err := nodes.cfg.HostAddr()
		if err != nil {
			return err
		}
		dns, err := startDNS(ctx, cfg, cp, host)
		if err != nil {
			return err
		}
		defer dns.Stop()
		dnsDone, dnsErr = dns.Done(), dns.Err
		ready = append(ready, "dns="+netip.AddrPortFrom(kubeDNSAddr, coredns.Port).String(), "dns-direct="+dns.String())
		log.Info("coredns ready", "pid", dns.PID(), "addr", dns.String(), "after", time.Since(start))
		if cfg.HAProxy {
			hp, err := startHAProxy(ctx, cfg, cp.Client, dns.Addr)
			if err != nil {
				return err
			}
			defer hp.Stop()
			haproxyDone, haproxyErr = hp.Done(), hp.Err
			ready = append(ready, "haproxy="+hp.URL, "haproxy-socket="+hp.Socket, "haproxy-name="+haproxyName())
			log.Info("haproxy ready", "pid", hp.PID(), "url", hp.URL, "after", time.Since(start))
		}
	}
	var skipperDone, traefikDone <-chan struct{} // nil, never ready, when not run
	var skipperErr, traefikErr func() error
	if cfg.skipper() {
		sk, err := startSkipper(ctx, cfg, cp)
		if err != nil {
			return err
		}
		defer sk.Stop()
		if err := createIngressClass(ctx, cp.Client); err != nil {
			return err
		}
		skipperDone, skipperErr = sk.Done(), sk.Err
		ready = append(ready, "ingress="+sk.URL, "routes="+sk.RoutesURL)
		if cfg.ProxyMode != kubeproxy.ModeNone {
			host, err := nodes.cfg.HostAddr()
			if err != nil {
				return err
			}
			fwd, inCluster, err := exposeSkipper(ctx, cp.Client, host, sk.URL)
			if err != nil {
				return err
			}
			defer fwd.Close()
			ready = append(ready, "ingress-in-cluster="+inCluster)
		}
		log.Info("skipper ready", "pid", sk.PID(), "after", time.Since(start))
	}
	if cfg.traefik() {
		tr, gw, err := startTraefik(ctx, cfg, cp)
		if tr != nil {
			defer tr.Stop()
		}
		if err != nil {
			return err
		}
		traefikDone, traefikErr = tr.Done(), tr.Err
		ready = append(ready, "traefik="+tr.URL, "traefik-https="+tr.HTTPSURL, "traefik-api="+tr.APIURL, "gateway="+gw)
		log.Info("traefik ready", "pid", tr.PID(), "gateway", gw, "after", time.Since(start))
	}
	var churnErr <-chan error // nil, never ready, without --churn
	var churned atomic.Int64
	if b := cfg.Ballast; b.Services > 0 {
		if err := startBallast(ctx, cfg, cp, ready, log); err != nil {
			return err
		}
		log.Info("ballast ready", "ballast", b.String(), "after", time.Since(start))
		ready = append(ready, "ballast="+b.String())
		if cfg.Churn > 0 {
			c, err := ballastClient(cp.RestConfig)
			if err != nil {
				return err
			}
			ch := make(chan error, 1)
			churnErr = ch
			go func() { ch <- churn(ctx, c, b, cfg.Churn, &churned) }()
			defer func() { log.Info("churn", "changes", churned.Load()) }()
		}
	}
	log.Info("ready", "after", time.Since(start))
	fmt.Fprintf(stdout, "READY %s\n", strings.Join(ready, " "))
	if f, ok := stdout.(*os.File); ok {
		_ = f.Sync()
	}

	select {
	case <-ctx.Done():
		log.Info("signal: tearing down")
		return nil
	case err := <-cp.Err():
		return fmt.Errorf("control plane: %w", err)
	case err := <-nodes.Err():
		return fmt.Errorf("node agent: %w", err)
	case <-skipperDone:
		return fmt.Errorf("skipper exited (see skipper.log): %v", skipperErr())
	case <-traefikDone:
		return fmt.Errorf("traefik exited (see traefik.log): %v", traefikErr())
	case <-dnsDone:
		return fmt.Errorf("coredns exited (see coredns.log): %v", dnsErr())
	case <-haproxyDone:
		return fmt.Errorf("haproxy exited (see haproxy.log): %v", haproxyErr())
	case <-proxyDone:
		return errors.New("kube-proxy exited (see kube-proxy.log)")
	case err := <-churnErr:
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
}

// startBallast creates the ballast with the running data plane's class and
// waits until Skipper (when it runs) routes every ballast Ingress, so that
// READY means the table has its production size.
func startBallast(ctx context.Context, cfg upConfig, cp *controlplane.ControlPlane, ready []string, log *slog.Logger) error {
	c, err := ballastClient(cp.RestConfig)
	if err != nil {
		return err
	}
	class := skipperClass
	if !cfg.skipper() {
		class = traefikClass
	}
	t0 := time.Now()
	if err := createBallast(ctx, c, cfg.Ballast, class, func(n int) {
		log.Info("ballast", "services", n, "after", time.Since(t0))
	}); err != nil {
		return fmt.Errorf("--%s: %w", flagBallast, err)
	}
	log.Info("ballast created", "services", cfg.Ballast.Services, "after", time.Since(t0))
	if !cfg.skipper() {
		return nil
	}
	var routes string
	for _, r := range ready {
		if v, ok := strings.CutPrefix(r, "routes="); ok {
			routes = v
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := waitSkipperRoutes(wctx, routes, cfg.Ballast.Services); err != nil {
		return fmt.Errorf("--%s: %w", flagBallast, err)
	}
	log.Info("ballast routed by skipper", "services", cfg.Ballast.Services, "after", time.Since(t0))
	return nil
}

func startSkipper(ctx context.Context, cfg upConfig, cp *controlplane.ControlPlane) (*skipper.Skipper, error) {
	tokenFile := filepath.Join(cp.PKI.Dir, "skipper.token")
	if err := os.WriteFile(tokenFile, []byte(cp.PKI.SkipperToken), 0o600); err != nil {
		return nil, err
	}
	sk, err := skipper.Start(ctx, skipper.Config{
		Binary:       filepath.Join(cfg.BinDir, "skipper"),
		APIServerURL: cp.URL,
		CAFile:       cp.PKI.CAFile,
		TokenFile:    tokenFile,
		PollInterval: cfg.IngressPoll,
		LogFile:      filepath.Join(cfg.Dir, "skipper.log"),
	})
	if err != nil {
		return nil, fmt.Errorf("skipper: %w", err)
	}
	return sk, nil
}

// startTraefik installs the Gateway API CRDs and Traefik's classes, starts
// Traefik, then creates its Gateway on Traefik's web port. The CRDs come
// first: Traefik's Gateway provider lists them at start and, when they are
// missing, retries with an exponential back-off (Provide in
// pkg/provider/kubernetes/gateway/kubernetes.go). It returns the Gateway as
// NS/NAME. Traefik is returned, to be stopped, even when a later step fails.
func startTraefik(ctx context.Context, cfg upConfig, cp *controlplane.ControlPlane) (*traefik.Traefik, string, error) {
	dyn, err := dynamic.NewForConfig(cp.RestConfig)
	if err != nil {
		return nil, "", err
	}
	if _, err := installGatewayAPI(ctx, dyn, filepath.Join(cfg.BinDir, GatewayAPIDir)); err != nil {
		return nil, "", fmt.Errorf("gateway API: %w", err)
	}
	if err := createTraefikClasses(ctx, cp.Client, dyn, !cfg.skipper()); err != nil {
		return nil, "", err
	}
	tokenFile := filepath.Join(cp.PKI.Dir, "traefik.token")
	if err := os.WriteFile(tokenFile, []byte(cp.PKI.TraefikToken), 0o600); err != nil {
		return nil, "", err
	}
	tr, err := traefik.Start(ctx, traefik.Config{
		Binary:       filepath.Join(cfg.BinDir, "traefik"),
		APIServerURL: cp.URL,
		CAFile:       cp.PKI.CAFile,
		TokenFile:    tokenFile,
		Throttle:     cfg.Throttle,
		LogFile:      filepath.Join(cfg.Dir, "traefik.log"),
	})
	if err != nil {
		return nil, "", fmt.Errorf("traefik: %w", err)
	}
	gw, err := createTraefikGateway(ctx, cp.Client, dyn, tr.Port)
	return tr, gw, err
}

// startServices makes ClusterIPs work: the API server reachable from pods
// for the kubernetes Service, then kube-proxy. stop undoes both, kube-proxy's
// rules included.
func startServices(ctx context.Context, cfg upConfig, cp *controlplane.ControlPlane, nodes *nodeAgent) (*kubeproxy.Proxy, func() error, error) {
	host, err := nodes.cfg.HostAddr()
	if err != nil {
		return nil, nil, err
	}
	fwd, err := forwardAPIServer(host, cp.URL)
	if err != nil {
		return nil, nil, err
	}
	if err := createKubernetesSlice(ctx, cp.Client, host); err != nil {
		fwd.Close()
		return nil, nil, err
	}
	kp, err := kubeproxy.Start(ctx, kubeproxy.Config{
		Mode:            cfg.ProxyMode,
		MinSyncPeriod:   cfg.ProxySync,
		Kubeconfig:      cp.Kubeconfig,
		NodeName:        nodes.cfg.Nodes[0],
		ClusterCIDR:     nodeagent.DefaultPodCIDR,
		NodePortAddress: host.String(),
		LogFile:         filepath.Join(cfg.Dir, "kube-proxy.log"),
	})
	if err != nil {
		fwd.Close()
		return nil, nil, fmt.Errorf("kube-proxy: %w", err)
	}
	return kp, func() error {
		err := kp.Stop()
		fwd.Close()
		if err != nil {
			return fmt.Errorf("kube-proxy teardown: %w", err)
		}
		return nil
	}, nil
}
