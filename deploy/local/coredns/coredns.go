// Package coredns runs CoreDNS (bin/coredns, built unmodified from the
// module pinned in deploy/local/coredns-build) as the local cluster's DNS:
// the kube-dns Service's backend, as kubeadm deploys it, but as a process on
// the machine like the cluster's other data-plane parts.
package coredns

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/epwindow/epwindow/deploy/local/internal/child"
	"github.com/epwindow/epwindow/deploy/local/internal/freeport"
)

// Config says how to run CoreDNS against the local API server.
type Config struct {
	// Binary is the coredns executable (bin/coredns from `make cluster`).
	Binary string
	// Kubeconfig is the kubernetes plugin's credentials (the API server
	// and user "coredns").
	Kubeconfig string
	// Listen is the address CoreDNS serves DNS on, port 53 (UDP and TCP):
	// the machine's address on the pod network, which the kube-dns
	// Service's EndpointSlice lists. Never a wildcard: only the cluster's
	// own network is answered.
	Listen netip.Addr
	// Domain is the cluster domain (cluster.local).
	Domain string
	// TTL is the kubernetes plugin's record TTL (kubeadm: 30 s): how long a
	// client may cache an answer about a Service or a pod.
	TTL time.Duration
	// Cache is the cache plugin's TTL cap (0: no cache plugin); it caches
	// the cluster domain's answers only with CacheCluster (kubeadm's
	// Corefile caches 30 s, but not the cluster domain's answers).
	Cache time.Duration
	// CacheCluster caches the cluster domain's answers as well: a deleted
	// pod's address then lives on in the cache for up to Cache after
	// CoreDNS's watch dropped it.
	CacheCluster bool
	// Dir holds the Corefile; LogFile receives CoreDNS's output.
	Dir, LogFile string
}

// CoreDNS is a running CoreDNS child process.
type CoreDNS struct {
	// Addr is where it answers DNS: Listen:53.
	Addr netip.AddrPort
	// ReadyURL answers 200 once the kubernetes plugin has synced; MetricsURL
	// is its Prometheus listener. Both on loopback.
	ReadyURL, MetricsURL string

	*child.Process
}

// Port is the DNS port CoreDNS serves, as kubeadm's.
const Port = 53

// Corefile is CoreDNS's configuration for cfg: kubeadm's default
// (cmd/kubeadm/app/phases/addons/dns/manifests.go, CoreDNSConfigMap) for
// the cluster domain and reverse zones, with health, ready and prometheus
// on the given loopback ports. It has no forward and no loop plugin: a
// name outside the cluster domain gets SERVFAIL rather than a query sent
// off the machine, which the local cluster never does.
func Corefile(cfg Config, healthPort, readyPort, metricsPort int) string {
	// cache takes a positive TTL: 0 leaves the plugin out.
	cache := ""
	if n := seconds(cfg.Cache); n > 0 {
		disable := ""
		if !cfg.CacheCluster {
			disable = fmt.Sprintf("\n        disable success %s\n        disable denial %s", cfg.Domain, cfg.Domain)
		}
		cache = fmt.Sprintf("\n    cache %d {%s\n    }", n, disable)
	}
	return fmt.Sprintf(`.:%d {
    bind %s
    errors
    health 127.0.0.1:%d {
        lameduck 5s
    }
    ready 127.0.0.1:%d
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl %d
    }
    prometheus 127.0.0.1:%d%s
    loadbalance
}
`, Port, cfg.Listen, healthPort, readyPort, cfg.Domain, cfg.Kubeconfig, seconds(cfg.TTL), metricsPort, cache)
}

// seconds is d in whole seconds, as CoreDNS's TTLs are, rounded up so that
// a non-zero d stays non-zero.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// Validate checks cfg before anything starts.
func (cfg Config) Validate() error {
	switch {
	case !cfg.Listen.IsValid() || cfg.Listen.IsUnspecified():
		return fmt.Errorf("coredns: listen address %v: want the machine's pod-network address", cfg.Listen)
	case cfg.Domain == "" || strings.ContainsAny(cfg.Domain, " {}\n"):
		return fmt.Errorf("coredns: cluster domain %q", cfg.Domain)
	case cfg.TTL < 0 || cfg.TTL > time.Hour:
		return fmt.Errorf("--dns-ttl %s: want 0 to 1h", cfg.TTL)
	case cfg.Cache < 0 || cfg.Cache > time.Hour:
		return fmt.Errorf("--dns-cache %s: want 0 to 1h", cfg.Cache)
	}
	return nil
}

// Start writes the Corefile, runs CoreDNS and returns once its kubernetes
// plugin has synced (/ready) and it answers a query for the cluster's
// kubernetes Service over UDP. CoreDNS is killed if this process dies.
func Start(ctx context.Context, cfg Config) (*CoreDNS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("coredns binary: %w (run make cluster)", err)
	}
	return child.Retry(ctx, 3, func() (*CoreDNS, error) { return start(ctx, cfg) })
}

func start(ctx context.Context, cfg Config) (*CoreDNS, error) {
	ports, err := freeport.Loopback(3)
	if err != nil {
		return nil, err
	}
	corefile := filepath.Join(cfg.Dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(Corefile(cfg, ports[0], ports[1], ports[2])), 0o644); err != nil {
		return nil, err
	}
	proc, err := child.Launch(cfg.Binary, []string{"-conf", corefile}, cfg.LogFile)
	if err != nil {
		return nil, err
	}
	c := &CoreDNS{
		Addr:       netip.AddrPortFrom(cfg.Listen, Port),
		ReadyURL:   fmt.Sprintf("http://127.0.0.1:%d/ready", ports[1]),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[2]),
		Process:    proc,
	}
	client := &http.Client{Timeout: time.Second}
	name := "kubernetes.default.svc." + cfg.Domain
	if err := proc.WaitReady(ctx, "coredns", filepath.Base(cfg.LogFile), 50*time.Millisecond, 30*time.Second, func() bool {
		if !child.HTTPOK(ctx, client, c.ReadyURL) {
			return false
		}
		_, err := c.LookupHost(ctx, name)
		return err == nil
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// LookupHost asks this CoreDNS (and nothing else) for name's addresses
// over UDP.
func (c *CoreDNS) LookupHost(ctx context.Context, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", c.Addr.String())
	}}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return r.LookupHost(ctx, strings.TrimSuffix(name, ".")+".")
}

// String names the server for the READY line: ADDR:PORT.
func (c *CoreDNS) String() string { return c.Addr.String() }
