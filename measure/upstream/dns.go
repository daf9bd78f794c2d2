package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"k8s.io/utils/clock"
)

// KindDNS is the DNS observer: it asks the cluster's DNS servers for a
// headless Service's name and lists the addresses they answer. Its stages
// are dns_last_present and dns_removed, beside any consumer's
// upstream stages.
const KindDNS = "dns"

// DNS settings' flag names; errors name them.
const (
	FlagDNSServer   = "dns-server"
	FlagDNSName     = "dns-name"
	FlagDNSInterval = "dns-interval"
)

// Where a cluster's DNS servers run when --dns-server does not say: the
// pods kubeadm's CoreDNS Deployment (and kube-dns before it) labels
// k8s-app=kube-dns in kube-system, serving port 53 in the pod.
const (
	DNSNamespace = "kube-system"
	DNSSelector  = "k8s-app=kube-dns"
	DNSPort      = 53
)

// DNSOptions say what the DNS observer asks and whom.
type DNSOptions struct {
	// Name is the fully qualified name to resolve: the probe's headless
	// Service, <service>.<namespace>.svc.<cluster domain>.
	Name string
	// Port is the port the addresses serve on: the observer lists
	// address:Port, as the other observers list endpoints.
	Port uint16
	// Servers, when set, are asked directly, one replica each
	// (--dns-server): host:port over UDP, or udp://host:port and
	// tcp://host:port; the port defaults to 53. Empty: every pod
	// DNSSelector picks in DNSNamespace, over TCP through a port-forward
	// (port-forwarding carries TCP only; CoreDNS serves both).
	Servers []string
	// Interval is the poll interval and so the resolution; zero means
	// DefaultInterval. Timeout bounds one query; zero means Interval, at
	// least 1 s.
	Interval time.Duration
	Timeout  time.Duration
}

// dnsServer is one replica to ask.
type dnsServer struct {
	net  string // "udp" or "tcp"
	addr string // host:port
}

// parseDNSServer reads one --dns-server value.
func parseDNSServer(s string) (dnsServer, error) {
	srv := dnsServer{net: "udp"}
	rest := s
	if scheme, after, ok := strings.Cut(s, "://"); ok {
		switch scheme {
		case "udp", "tcp":
			srv.net = scheme
		case "http":
			// A port-forward's local end (podSource's BaseURL): TCP.
			srv.net = "tcp"
		default:
			return srv, fmt.Errorf("--%s %q: scheme %q: want udp:// or tcp://", FlagDNSServer, s, scheme)
		}
		rest = after
	}
	rest = strings.TrimRight(rest, "/")
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		host, port = strings.Trim(rest, "[]"), strconv.Itoa(DNSPort)
	}
	if host == "" {
		return srv, fmt.Errorf("--%s %q: no host", FlagDNSServer, s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return srv, fmt.Errorf("--%s %q: port %q is not a port number", FlagDNSServer, s, port)
	}
	srv.addr = net.JoinHostPort(host, port)
	return srv, nil
}

// DNSServerAddr is a --dns-server value's host:port (port 53 by default),
// for a client of its own that asks the same server.
func DNSServerAddr(s string) (string, error) {
	srv, err := parseDNSServer(s)
	return srv.addr, err
}

// NewDNS builds the DNS observer. Servers are checked here, so a bad
// --dns-server fails before anything is created.
func NewDNS(deps Deps, o DNSOptions) (Observer, error) {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = max(o.Interval, time.Second)
	}
	name := strings.TrimSpace(o.Name)
	if name == "" {
		return nil, fmt.Errorf("--%s: no name to resolve", FlagDNSName)
	}
	if _, ok := dns.IsDomainName(name); !ok {
		return nil, fmt.Errorf("--%s %q: not a domain name", FlagDNSName, name)
	}
	obs := &dnsObserver{name: dns.Fqdn(name), port: o.Port, interval: o.Interval, timeout: o.Timeout, clock: deps.Clock}
	if len(o.Servers) > 0 {
		for _, s := range o.Servers {
			if _, err := parseDNSServer(s); err != nil {
				return nil, err
			}
		}
		obs.src = urlSource(o.Servers)
		return obs, nil
	}
	if deps.Client == nil || deps.Config == nil {
		return nil, fmt.Errorf("the DNS observer needs a cluster client to find the DNS pods, or --%s", FlagDNSServer)
	}
	obs.src = &podSource{client: deps.Client, config: deps.Config, namespace: DNSNamespace, selector: DNSSelector,
		port: DNSPort, portFlag: FlagDNSServer, whereFlag: FlagDNSServer, refresh: max(10*o.Interval, 10*time.Second), now: deps.Clock.Now}
	return obs, nil
}

// dnsObserver asks each DNS replica for the A and AAAA records of one name
// at each poll. An answer is a reading whatever its code: NXDOMAIN or an
// empty answer lists no address (the server holds none for the name now),
// while a timeout, a refused connection, SERVFAIL or REFUSED make the
// reading blind (nothing is concluded from them).
type dnsObserver struct {
	name     string // fully qualified
	port     uint16
	src      source
	interval time.Duration
	timeout  time.Duration
	clock    clock.PassiveClock

	mu sync.Mutex
	// minTTL and maxTTL are the shortest and longest TTL seen on the
	// name's records; seen tells whether any was.
	minTTL, maxTTL uint32
	seen           bool
}

func (o *dnsObserver) Name() string              { return KindDNS }
func (o *dnsObserver) Resolution() time.Duration { return o.interval }
func (o *dnsObserver) Close() error              { return o.src.close() }

// Settings are the name asked and the longest TTL its answers carried
// ("ttl"): the kubernetes plugin's ttl (5 s by default, 30 s in kubeadm's
// Corefile), or what a cache plugin clamped it to (plugin/cache/cache.go,
// computeTTL: into [5 s, its cap]). A cache answers with the time its copy
// has left, so shorter TTLs are seen too: "ttl_seen" gives their range
// then, and says that a cache held the answers. Settings are read when the
// results header is written, after the polls of the steady-state wait:
// the absence of ttl_seen does not prove there is no cache.
func (o *dnsObserver) Settings(context.Context) map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := map[string]string{"name": strings.TrimSuffix(o.name, ".")}
	if o.seen {
		d := func(t uint32) string { return (time.Duration(t) * time.Second).String() }
		s["ttl"] = d(o.maxTTL)
		if o.minTTL < o.maxTTL {
			s["ttl_seen"] = d(o.minTTL) + "–" + d(o.maxTTL) + " (answered from a cache)"
		}
	}
	return s
}

// Version is what the DNS pods' images tag ("v1.11.3"), "" when the servers
// were named by address.
func (o *dnsObserver) Version(ctx context.Context) string {
	return imageTags(o.src.containers(ctx))
}

func (o *dnsObserver) Poll(ctx context.Context) (Snapshot, error) {
	return pollReplicas(ctx, KindDNS, o.clock, o.src, o.read)
}

// read asks one replica for A, then AAAA: Sent before the first query left,
// At when the second answer arrived.
func (o *dnsObserver) read(ctx context.Context, ep endpoint) ReplicaUpstreams {
	r := ReplicaUpstreams{Replica: ep.Replica}
	srv, err := parseDNSServer(ep.BaseURL)
	if err != nil {
		r.Sent = o.clock.Now()
		r.At, r.Err = r.Sent, err
		return r
	}
	hint := ""
	if ep.Hint != "" {
		hint = " (" + ep.Hint + ")"
	}
	c := &dns.Client{Net: srv.net, Timeout: o.timeout}
	r.Sent = o.clock.Now()
	var ups []netip.AddrPort
	var ttls []uint32
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		m := new(dns.Msg)
		m.SetQuestion(o.name, qt)
		// The answer of the server asked, as a client resolving the name
		// would get it: recursion desired, like a stub resolver.
		m.RecursionDesired = true
		in, _, err := c.ExchangeContext(ctx, m, srv.addr)
		if err == nil && in.Truncated && srv.net == "udp" {
			// Too many addresses for 512 bytes: ask again over TCP, as a
			// resolver does.
			in, _, err = (&dns.Client{Net: "tcp", Timeout: o.timeout}).ExchangeContext(ctx, m, srv.addr)
		}
		if err != nil {
			r.At = o.clock.Now()
			r.Err = fmt.Errorf("dns replica %s: %s %s: %w%s", ep.Replica, dns.TypeToString[qt], o.name, err, hint)
			return r
		}
		r.Bytes += int64(in.Len())
		switch in.Rcode {
		case dns.RcodeSuccess, dns.RcodeNameError:
		default:
			r.At = o.clock.Now()
			r.Err = fmt.Errorf("dns replica %s: %s %s: %s%s", ep.Replica, dns.TypeToString[qt], o.name, dns.RcodeToString[in.Rcode], hint)
			return r
		}
		for _, rr := range in.Answer {
			var a net.IP
			switch v := rr.(type) {
			case *dns.A:
				a = v.A
			case *dns.AAAA:
				a = v.AAAA
			default:
				continue // a CNAME on the way
			}
			if ip, ok := netip.AddrFromSlice(a); ok {
				ups = append(ups, netip.AddrPortFrom(ip.Unmap(), o.port))
				ttls = append(ttls, rr.Header().Ttl)
			}
		}
	}
	r.At = o.clock.Now()
	r.Upstreams = dedup(ups)
	o.noteTTLs(ttls)
	return r
}

func (o *dnsObserver) noteTTLs(ttls []uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range ttls {
		if !o.seen || t < o.minTTL {
			o.minTTL = t
		}
		if !o.seen || t > o.maxTTL {
			o.maxTTL = t
		}
		o.seen = true
	}
}

// ErrDNSNoAnswer is wrapped by PreflightDNS when a server did not answer.
var ErrDNSNoAnswer = errors.New("the DNS server did not answer")

// PreflightDNS asks every replica once, before a run creates anything, so
// that a server that does not answer (a wrong --dns-server, CoreDNS down)
// fails the run at once instead of blinding every trial. Any answer passes,
// NXDOMAIN included: the name may be the run's own headless Service, not
// created yet.
func PreflightDNS(ctx context.Context, obs Observer) error {
	o, ok := obs.(*dnsObserver)
	if !ok {
		return nil
	}
	snap, err := o.Poll(ctx)
	if err != nil {
		return err
	}
	if len(snap.Replicas) == 0 {
		return fmt.Errorf("%w: no DNS pods match %s in namespace %s; set --%s", ErrDNSNoAnswer, DNSSelector, DNSNamespace, FlagDNSServer)
	}
	var errs []error
	for _, r := range snap.Replicas {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrDNSNoAnswer, errors.Join(errs...))
	}
	return nil
}

// DNSName is the name a headless Service's endpoints resolve under.
func DNSName(service, namespace, clusterDomain string) string {
	if clusterDomain == "" {
		clusterDomain = "cluster.local"
	}
	return service + "." + namespace + ".svc." + strings.Trim(clusterDomain, ".")
}
