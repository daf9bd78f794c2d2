package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/epwindow/epwindow/internal/localcluster/flock"
)

// Options are `epwindow-local up`'s flags and how long to wait for it; the
// zero value is 2 nodes, no batch period, Skipper polling every 3 s, in a
// fresh temporary directory.
type Options struct {
	// Nodes is --nodes (0 = 2).
	Nodes int
	// BatchPeriod is the EndpointSlice controller's
	// --endpointslice-updates-batch-period (--batch-period).
	BatchPeriod time.Duration
	// IngressPoll is Skipper's poll interval, --ingress-poll (0 = 3s).
	IngressPoll time.Duration
	// ProxyMode is kube-proxy's mode, --proxy-mode (nftables, iptables,
	// none; "" = up's default, nftables).
	ProxyMode string
	// ProxyMinSyncPeriod is kube-proxy's --min-sync-period, passed as
	// --proxy-min-sync-period (0 = up's default, kube-proxy's 1 s).
	ProxyMinSyncPeriod time.Duration
	// Ingress is --ingress: the data planes, "skipper" (up's default, when
	// empty), "traefik" or "all".
	Ingress string
	// TraefikThrottle is Traefik's providersThrottleDuration,
	// --traefik-throttle (0 = up's default, Traefik's 2 s; set
	// TraefikNoThrottle for none).
	TraefikThrottle time.Duration
	// TraefikNoThrottle passes --traefik-throttle 0.
	TraefikNoThrottle bool
	// Dir is --dir: the cluster's kubeconfigs, state and logs; empty = a
	// new temporary directory, removed by Stop unless the cluster failed.
	Dir string
	// Timeout bounds the wait for READY (0 = 2 minutes).
	Timeout time.Duration
	// MaxEndpointsPerSlice, Ballast and Churn are up's production-shape
	// flags (--max-endpoints-per-slice, --ballast SERVICESxENDPOINTS,
	// --churn changes a second); zero values leave them out. A ballast of
	// thousands of Services needs a longer Timeout.
	MaxEndpointsPerSlice int
	Ballast              string
	Churn                float64
	// DNS runs CoreDNS as the cluster DNS (up --dns): kube-system/kube-dns
	// at 10.96.0.10, in ClusterFirst pods' resolv.conf. It needs bin/coredns.
	DNS bool
	// DNSTTL is the kubernetes plugin's ttl (up --dns-ttl), DNSCache the
	// cache plugin's cap (--dns-cache) and DNSCacheCluster lets the cache
	// hold the cluster domain's answers too (--dns-cache-cluster); zero
	// values leave up's defaults (kubeadm's Corefile).
	DNSTTL          time.Duration
	DNSCache        time.Duration
	DNSCacheCluster bool
	// HAProxy runs Debian's HAProxy resolving the headless Service
	// epwindow-dns/dnsprobe through CoreDNS (up --haproxy; needs DNS), and
	// HAProxyResolve is its timeout resolve (zero: up's default, 1 s).
	HAProxy        bool
	HAProxyResolve time.Duration
}

// args is up's command line for o (defaults applied).
func (o Options) args(dir string) []string {
	args := []string{"up",
		"--dir", dir,
		"--nodes", strconv.Itoa(o.Nodes),
		"--batch-period", o.BatchPeriod.String(),
		"--ingress-poll", o.IngressPoll.String(),
	}
	// Passed only when set: up's defaults apply otherwise.
	if o.ProxyMode != "" {
		args = append(args, "--proxy-mode", o.ProxyMode)
	}
	if o.Ingress != "" {
		args = append(args, "--ingress", o.Ingress)
	}
	if o.TraefikThrottle != 0 || o.TraefikNoThrottle {
		args = append(args, "--traefik-throttle", o.TraefikThrottle.String())
	}
	if o.ProxyMinSyncPeriod != 0 {
		args = append(args, "--proxy-min-sync-period", o.ProxyMinSyncPeriod.String())
	}
	if o.MaxEndpointsPerSlice != 0 {
		args = append(args, "--max-endpoints-per-slice", strconv.Itoa(o.MaxEndpointsPerSlice))
	}
	if o.Ballast != "" {
		args = append(args, "--ballast", o.Ballast)
	}
	if o.Churn != 0 {
		args = append(args, "--churn", strconv.FormatFloat(o.Churn, 'f', -1, 64))
	}
	if o.DNS {
		args = append(args, "--dns")
	}
	if o.DNSTTL != 0 {
		args = append(args, "--dns-ttl", o.DNSTTL.String())
	}
	if o.DNSCache != 0 {
		args = append(args, "--dns-cache", o.DNSCache.String())
	}
	if o.DNSCacheCluster {
		args = append(args, "--dns-cache-cluster")
	}
	if o.HAProxy {
		args = append(args, "--haproxy")
	}
	if o.HAProxyResolve != 0 {
		args = append(args, "--haproxy-resolve", o.HAProxyResolve.String())
	}
	return args
}

// binaries are what o's cluster runs from bin/.
func (o Options) binaries() []string {
	names := []string{"epwindow-local"}
	if o.Ingress != "traefik" {
		names = append(names, "skipper")
	}
	if o.Ingress == "traefik" || o.Ingress == "all" {
		names = append(names, "traefik", "gateway-api-crds")
	}
	if o.DNS {
		names = append(names, "coredns")
	}
	return names
}

func (o Options) withDefaults() Options {
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.IngressPoll == 0 {
		o.IngressPoll = 3 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	return o
}

// Cluster is a running local cluster.
type Cluster struct {
	// Dir is the cluster's directory (logs: DIR/*.log).
	Dir string
	// Kubeconfig is the admin kubeconfig's path.
	Kubeconfig string
	// RestrictedKubeconfig is a kubeconfig for a user with no RBAC bindings.
	RestrictedKubeconfig string
	// Config is the admin client configuration, loaded from Kubeconfig
	// (client-go's default QPS and burst).
	Config *rest.Config
	// Client is an admin client with room for a test's bursts (QPS 100,
	// burst 200).
	Client kubernetes.Interface
	// IngressURL is Skipper's proxy listener, http://127.0.0.1:PORT
	// (empty without Skipper).
	IngressURL string
	// RoutesURL is Skipper's route table, http://127.0.0.1:PORT/routes.
	RoutesURL string
	// IngressInClusterURL is Skipper as pods reach it: the ClusterIP of
	// its Service, kube-system/skipper-ingress, port 80 (empty without
	// Skipper or kube-proxy).
	IngressInClusterURL string
	// TraefikURL is Traefik's web entry point, http://127.0.0.1:PORT, where
	// its Ingress providers and its Gateway serve (empty without Traefik).
	TraefikURL string
	// TraefikHTTPSURL is Traefik's websecure entry point,
	// https://127.0.0.1:PORT: the same routers with TLS, certificates from
	// the Ingresses' spec.tls Secrets (deploy/local/traefik).
	TraefikHTTPSURL string
	// TraefikAPIURL is Traefik's API root (…/api/http/services).
	TraefikAPIURL string
	// Gateway is Traefik's Gateway, NS/NAME, of GatewayClass traefik.
	Gateway string
	// KubeProxyMetricsURL is kube-proxy's /metrics on loopback (empty
	// without kube-proxy).
	KubeProxyMetricsURL string
	// DNS is the kube-dns Service, 10.96.0.10:53, and DNSDirect CoreDNS's
	// own address on the pod network (empty without Options.DNS).
	DNS, DNSDirect string
	// HAProxyURL is HAProxy's frontend (http://127.0.0.1:PORT),
	// HAProxySocket its stats socket (unix://PATH) and HAProxyName the
	// headless Service name it resolves; empty without Options.HAProxy.
	HAProxyURL, HAProxySocket, HAProxyName string
	// StartupTime is from starting the binary to its READY line.
	StartupTime time.Duration
	// PID is epwindow-local's process: etcd, the API server, the
	// controllers, the scheduler and the node agent (Skipper and the pods'
	// processes are processes of their own).
	PID int

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	ownDir  bool
	lock    *os.File
}

// LockFile serialises local clusters started in the machine's own network
// namespace: they share the pod network (10.244.0.0/16, one bridge), so test
// packages that run in parallel take turns. Start holds it until Stop or
// Release. A test binary run through Isolate (Main does) has namespaces of
// its own and takes no lock.
const LockFile = "/run/epwindow-local-tests.lock"

// RepoRoot walks up from the working directory to the directory whose
// go.mod declares the tool's module (github.com/epwindow/epwindow).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/epwindow/epwindow\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod of github.com/epwindow/epwindow) not found above the working directory")
		}
		dir = parent
	}
}

// BinDir is the repository's bin/, where `make cluster` and `make build`
// put epwindow-local, skipper and epwindow.
func BinDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// RequireBinaries fails, saying how to build them, if any of the named
// binaries is missing from BinDir.
func RequireBinaries(names ...string) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(bin, n)); err != nil {
			how := "make cluster"
			if n == "epwindow" {
				how = "make build"
			}
			return fmt.Errorf("%s missing: run %s", filepath.Join(bin, n), how)
		}
	}
	return nil
}

// Binary returns the path of bin/epwindow-local, or an error that says how
// to build it.
func Binary() (string, error) {
	if err := RequireBinaries("epwindow-local"); err != nil {
		return "", err
	}
	bin, err := BinDir()
	return filepath.Join(bin, "epwindow-local"), err
}

// Start runs `bin/epwindow-local up` and waits for its READY line. The
// cluster needs root (network namespaces). In the machine's own network
// namespace only one local cluster runs at a time: Start first waits
// (bounded by ctx) for another package's cluster to stop; after Isolate it
// starts at once. On failure it returns the tail of the cluster's log in
// the error.
func Start(ctx context.Context, o Options) (_ *Cluster, retErr error) {
	if err := RequireBinaries(o.binaries()...); err != nil {
		return nil, err
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	o = o.withDefaults()
	asked := time.Now()
	var lock *os.File
	if !isolated {
		if lock, err = flock.Acquire(ctx, LockFile, nil); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("waiting for another test package's local cluster to stop (%s): %w", LockFile, err)
			}
			return nil, err
		}
		defer func() {
			if retErr != nil {
				lock.Close()
			}
		}()
	}
	locked := time.Now()
	c := &Cluster{Dir: o.Dir, done: make(chan struct{}), lock: lock}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "epwindow-local-"); err != nil {
			return nil, err
		}
		c.ownDir = true
	}
	c.cmd = exec.Command(bin, o.args(c.Dir)...)
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(filepath.Join(c.Dir, "up.stderr"))
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	c.cmd.Stderr = stderr
	// Own process group: a ^C in the test's terminal reaches the test
	// binary, whose Stop then tears the cluster down in order.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	began := time.Now()
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c.PID = c.cmd.Process.Pid
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.done)
	}()

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "READY ") {
				ready <- line
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	select {
	case line := <-ready:
		c.StartupTime = time.Since(began)
		if err := c.parseReady(line); err != nil {
			c.Stop()
			return nil, err
		}
	case <-c.done:
		return nil, fmt.Errorf("epwindow-local up exited before READY: %v\n%s", c.waitErr, c.LogTail())
	case <-timer.C:
		c.Stop()
		return nil, fmt.Errorf("epwindow-local up not READY after %s\n%s", o.Timeout, c.LogTail())
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	}
	c.RestrictedKubeconfig = filepath.Join(filepath.Dir(c.Kubeconfig), "kubeconfig-restricted")
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		c.Stop()
		return nil, fmt.Errorf("load %s: %w", c.Kubeconfig, err)
	}
	cc := rest.CopyConfig(c.Config)
	cc.QPS, cc.Burst = 100, 200
	if c.Client, err = kubernetes.NewForConfig(cc); err != nil {
		c.Stop()
		return nil, fmt.Errorf("client for %s: %w", c.Kubeconfig, err)
	}
	logTiming("lock_wait=%s start=%s", locked.Sub(asked), time.Since(locked))
	return c, nil
}

// TimingPrefix starts the lines a test binary's Start and Shutdown write to
// stderr: how long it waited for the machine lock (another package's
// cluster), started its cluster and stopped it. hack/testtimes reads them
// from `go test -json` to split an e2e package's wall time into waiting,
// cluster start, its tests and stop; go test shows them only with -v or
// -json, or when the package fails.
const TimingPrefix = "localcluster-timing:"

// logTiming writes one TimingPrefix line, in test binaries only.
func logTiming(format string, d ...time.Duration) {
	if !testing.Testing() {
		return
	}
	args := make([]any, len(d))
	for i, v := range d {
		args[i] = v.Round(time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, TimingPrefix+" "+format+"\n", args...)
}

// parseReady reads "READY kubeconfig=P [ingress=U routes=U] [traefik=U
// traefik-https=U traefik-api=U gateway=NS/NAME]".
func (c *Cluster) parseReady(line string) error {
	for _, f := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "kubeconfig":
			c.Kubeconfig = v
		case "ingress":
			c.IngressURL = v
		case "routes":
			c.RoutesURL = v
		case "ingress-in-cluster":
			c.IngressInClusterURL = v
		case "traefik":
			c.TraefikURL = v
		case "traefik-https":
			c.TraefikHTTPSURL = v
		case "traefik-api":
			c.TraefikAPIURL = v
		case "gateway":
			c.Gateway = v
		case "kube-proxy-metrics":
			c.KubeProxyMetricsURL = v
		case "dns":
			c.DNS = v
		case "dns-direct":
			c.DNSDirect = v
		case "haproxy":
			c.HAProxyURL = v
		case "haproxy-socket":
			c.HAProxySocket = v
		case "haproxy-name":
			c.HAProxyName = v
		}
	}
	skipper := c.IngressURL != "" && c.RoutesURL != ""
	traefik := c.TraefikURL != "" && c.TraefikHTTPSURL != "" && c.TraefikAPIURL != "" && c.Gateway != ""
	if c.Kubeconfig == "" || !skipper && !traefik {
		return fmt.Errorf("malformed READY line %q", line)
	}
	return nil
}

// LogTail is the end of up's stderr and of its own log, for error messages.
func (c *Cluster) LogTail() string {
	var b strings.Builder
	for _, name := range []string{"up.stderr", "epwindow-local.log"} {
		data, err := os.ReadFile(filepath.Join(c.Dir, name))
		if err != nil {
			continue
		}
		if len(data) > 4096 {
			data = data[len(data)-4096:]
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", filepath.Join(c.Dir, name), data)
	}
	return b.String()
}

// Done is closed when the cluster process has exited (for a test that
// wants to fail fast when the cluster dies under it).
func (c *Cluster) Done() <-chan struct{} { return c.done }

// Kill SIGKILLs epwindow-local (a crash: no teardown runs) and waits for
// it. The machine lock stays held until Release.
func (c *Cluster) Kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// Release lets another package's cluster start (after Isolate there is no
// lock to release). Stop calls it; a test that checks what a teardown left
// calls Shutdown, checks, then Release.
func (c *Cluster) Release() {
	if c.lock != nil {
		c.lock.Close()
	}
}

// Stop is Shutdown, then Release.
func (c *Cluster) Stop() error {
	defer c.Release()
	return c.Shutdown()
}

// Shutdown sends SIGTERM and waits for the teardown (SIGKILL after 90 s),
// keeping the machine lock. It returns the process's exit error; a
// temporary Dir is removed after a clean exit.
func (c *Cluster) Shutdown() error {
	select {
	case <-c.done:
	default:
		began := time.Now()
		defer func() { logTiming("stop=%s", time.Since(began)) }()
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(90 * time.Second)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.done
			return fmt.Errorf("epwindow-local did not stop within 90s after SIGTERM; killed (logs in %s)", c.Dir)
		}
	}
	if c.waitErr != nil {
		return fmt.Errorf("epwindow-local exited with %v (logs in %s)", c.waitErr, c.Dir)
	}
	if c.ownDir {
		return os.RemoveAll(c.Dir)
	}
	return nil
}

// ReadyAfter is up's own startup time, from taking the machine lock to
// READY, as it logs it in DIR/epwindow-local.log ("msg=ready after=…");
// unlike StartupTime it excludes waiting for another run to stop.
func (c *Cluster) ReadyAfter() (time.Duration, error) {
	path := filepath.Join(c.Dir, "epwindow-local.log")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, " msg=ready ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "after="); ok {
				return time.ParseDuration(v)
			}
		}
	}
	return 0, fmt.Errorf("no ready line in %s", path)
}

// Main is a package's TestMain: it runs the test binary in namespaces of
// its own (Isolate), starts the local cluster with o (waiting up to 10
// minutes for READY), hands it to setup (nil: none), runs the tests, stops
// the cluster and exits. pkg names the package in errors.
func Main(m *testing.M, pkg string, o Options, setup func(*Cluster) error) {
	Isolate()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	c, err := Start(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s needs the local cluster: %v\n", pkg, err)
		os.Exit(1)
	}
	code := func() int {
		if setup != nil {
			if err := setup(c); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", pkg, err)
				return 1
			}
		}
		return m.Run()
	}()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the local cluster:", err)
		code = 1
	}
	os.Exit(code)
}
