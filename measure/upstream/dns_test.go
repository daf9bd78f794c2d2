package upstream

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/epwindow/epwindow/internal/dnstest"
)

// newZone is the test DNS server's zone: the name newTestDNS asks.
func newZone(ttl uint32, addrs ...netip.Addr) *dnstest.Zone {
	return &dnstest.Zone{Name: "probe.ns.svc.cluster.local.", TTL: ttl, Addrs: addrs}
}

func newTestDNS(t *testing.T, servers ...string) *dnsObserver {
	t.Helper()
	obs, err := NewDNS(Deps{}, DNSOptions{Name: "probe.ns.svc.cluster.local", Port: 8080, Servers: servers, Interval: 50 * time.Millisecond, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return obs.(*dnsObserver)
}

func TestDNSObserverListsAnswers(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.7"), netip.MustParseAddr("fd00::9")
	z := newZone(30, a, b, c)
	addr := dnstest.Serve(t, z)
	for _, srv := range []string{addr, "udp://" + addr, "tcp://" + addr} {
		obs := newTestDNS(t, srv)
		snap, err := obs.Poll(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Replicas) != 1 || snap.Replicas[0].Err != nil {
			t.Fatalf("%s: replicas %+v", srv, snap.Replicas)
		}
		r := snap.Replicas[0]
		want := []netip.AddrPort{netip.AddrPortFrom(a, 8080), netip.AddrPortFrom(b, 8080), netip.AddrPortFrom(c, 8080)}
		if !sameAddrs(r.Upstreams, want) {
			t.Errorf("%s: upstreams %v, want %v", srv, r.Upstreams, want)
		}
		if r.Sent.IsZero() || r.At.Before(r.Sent) || r.Bytes == 0 {
			t.Errorf("%s: reading not stamped or sized: %+v", srv, r)
		}
		if got := obs.Settings(context.Background()); got["ttl"] != "30s" || got["name"] != "probe.ns.svc.cluster.local" || got["ttl_seen"] != "" {
			t.Errorf("%s: settings %v", srv, got)
		}
	}
	// A cache answers with what its copy has left: the longest TTL is the
	// setting, and the range says a cache counted it down.
	obs := newTestDNS(t, addr)
	for _, ttl := range []uint32{12, 30, 4} {
		z.SetTTL(ttl)
		if _, err := obs.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := obs.Settings(context.Background()); got["ttl"] != "30s" || got["ttl_seen"] != "4s–30s (answered from a cache)" {
		t.Errorf("counted-down TTLs: settings %v", got)
	}
}

// A name with no address now (NXDOMAIN, as for a Service that is not
// there, or an empty answer) is a reading that lists nothing; a server
// failure or no server is a blind reading, never a removal.
func TestDNSObserverAnswerCodes(t *testing.T) {
	z := newZone(5)
	addr := dnstest.Serve(t, z)
	obs := newTestDNS(t, addr)
	ctx := context.Background()

	snap, _ := obs.Poll(ctx)
	if r := snap.Replicas[0]; r.Err != nil || len(r.Upstreams) != 0 {
		t.Errorf("empty answer: %+v, want a reading listing nothing", r)
	}
	wrong, err := NewDNS(Deps{}, DNSOptions{Name: "other.ns.svc.cluster.local", Port: 8080, Servers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ = wrong.Poll(ctx)
	if r := snap.Replicas[0]; r.Err != nil || len(r.Upstreams) != 0 {
		t.Errorf("NXDOMAIN: %+v, want a reading listing nothing", r)
	}
	z.SetRcode(dns.RcodeServerFailure)
	snap, _ = obs.Poll(ctx)
	if r := snap.Replicas[0]; r.Err == nil || !strings.Contains(r.Err.Error(), "SERVFAIL") {
		t.Errorf("SERVFAIL: %+v, want a blind reading naming SERVFAIL", r)
	}
	if err := PreflightDNS(ctx, obs); !errors.Is(err, ErrDNSNoAnswer) {
		t.Errorf("preflight with SERVFAIL: %v, want ErrDNSNoAnswer", err)
	}

	// A port nothing listens on: refused (ICMP) or timed out, blind either way.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	none := newTestDNS(t, dead)
	snap, _ = none.Poll(ctx)
	if r := snap.Replicas[0]; r.Err == nil || !strings.Contains(r.Err.Error(), dead) {
		t.Errorf("no server: %+v, want a blind reading naming the replica", r)
	}
	if err := PreflightDNS(ctx, none); !errors.Is(err, ErrDNSNoAnswer) || !strings.Contains(err.Error(), dead) {
		t.Errorf("preflight with no server: %v", err)
	}
	z.SetRcode(dns.RcodeSuccess)
	if err := PreflightDNS(ctx, wrong); err != nil {
		t.Errorf("preflight with NXDOMAIN: %v, want nil (the run's Service is created later)", err)
	}
}

// A UDP answer cut short (TC) is asked again over TCP, as a stub resolver
// does: a Service with more addresses than fit 512 bytes is listed whole.
func TestDNSObserverRetriesTruncatedOverTCP(t *testing.T) {
	var addrs []netip.Addr
	for i := range 100 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 244, byte(i / 200), byte(1 + i%200)}))
	}
	z := newZone(30, addrs...)
	z.TruncateUDP = 20
	obs := newTestDNS(t, dnstest.Serve(t, z))
	snap, _ := obs.Poll(context.Background())
	if r := snap.Replicas[0]; r.Err != nil || len(r.Upstreams) != len(addrs) {
		t.Fatalf("truncated: %d upstreams (err %v), want %d", len(r.Upstreams), r.Err, len(addrs))
	}
}

// The tracker turns the DNS readings into a removal bracketed by the last
// answer that held the address and the first that did not.
func TestDNSObserverRemovalThroughTracker(t *testing.T) {
	a, b := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.7")
	z := newZone(5, a, b)
	obs := newTestDNS(t, dnstest.Serve(t, z))
	tr := NewTracker(obs, nil, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = tr.Run(ctx) }()
	target := netip.AddrPortFrom(a, 8080)
	waitFor(t, func() bool { return len(tr.Removals(target)) == 1 })
	removedAt := time.Now()
	z.Set(b)
	waitFor(t, func() bool { gone, _ := tr.Gone(target); return gone })
	cancel()
	<-done
	rm := tr.Removals(target)[0]
	after, notAfter := rm.Bracket()
	if rm.Observer != KindDNS || rm.Invalid() != "" {
		t.Fatalf("removal %+v (%s)", rm, rm.Invalid())
	}
	// The server changed its answer at removedAt: the bracket holds it, and
	// is no wider than two polls plus the answers' round trips.
	if after.After(removedAt) || notAfter.Before(removedAt) || notAfter.Sub(after) > 4*obs.interval+time.Second {
		t.Errorf("bracket [%s, %s] vs change at %s", after.Format(time.StampMicro), notAfter.Format(time.StampMicro), removedAt.Format(time.StampMicro))
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDNSOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		opts DNSOptions
		want string
	}{
		{DNSOptions{Name: "", Servers: []string{"10.0.0.10"}}, "--dns-name"},
		{DNSOptions{Name: "a..b", Servers: []string{"10.0.0.10"}}, "--dns-name"},
		{DNSOptions{Name: "probe.ns.svc.cluster.local", Servers: []string{"https://10.0.0.10"}}, "--dns-server"},
		{DNSOptions{Name: "probe.ns.svc.cluster.local", Servers: []string{"10.0.0.10:0"}}, "--dns-server"},
		{DNSOptions{Name: "probe.ns.svc.cluster.local", Servers: []string{"10.0.0.10:dns"}}, "--dns-server"},
		{DNSOptions{Name: "probe.ns.svc.cluster.local", Servers: []string{"udp://"}}, "--dns-server"},
		{DNSOptions{Name: "probe.ns.svc.cluster.local"}, "--dns-server"}, // no client to find pods
	} {
		_, err := NewDNS(Deps{}, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one naming %s", tc.opts, err, tc.want)
		}
	}
	for in, want := range map[string]dnsServer{
		"10.96.0.10":           {"udp", "10.96.0.10:53"},
		"10.96.0.10:5353":      {"udp", "10.96.0.10:5353"},
		"tcp://10.96.0.10":     {"tcp", "10.96.0.10:53"},
		"udp://[fd00::a]:53":   {"udp", "[fd00::a]:53"},
		"fd00::a":              {"udp", "[fd00::a]:53"},
		"http://127.0.0.1:999": {"tcp", "127.0.0.1:999"},
	} {
		got, err := parseDNSServer(in)
		if err != nil || got != want {
			t.Errorf("parseDNSServer(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if got := DNSName("probe", "ns", ""); got != "probe.ns.svc.cluster.local" {
		t.Errorf("DNSName = %q", got)
	}
}

// Without --dns-server the DNS replicas are the kube-dns pods of
// kube-system, each reached over TCP through its own port-forward; none
// running is an error that names --dns-server, and so is a failed
// port-forward (here: no API server), as a blind reading.
func TestDNSObserverFindsTheKubeDNSPods(t *testing.T) {
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: DNSNamespace, Name: name, Labels: labels},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	empty := fake.NewClientset(pod("other", map[string]string{"k8s-app": "metrics-server"}))
	obs, err := NewDNS(Deps{Client: empty, Config: restCfg}, DNSOptions{Name: "probe.ns.svc.cluster.local", Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	if err := PreflightDNS(context.Background(), obs); err == nil || !strings.Contains(err.Error(), "k8s-app=kube-dns") || !strings.Contains(err.Error(), "--dns-server") {
		t.Errorf("no kube-dns pods: %v, want an error naming the selector and --dns-server", err)
	}
	cs := fake.NewClientset(pod("coredns-a", map[string]string{"k8s-app": "kube-dns"}))
	obs, err = NewDNS(Deps{Client: cs, Config: restCfg}, DNSOptions{Name: "probe.ns.svc.cluster.local", Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := obs.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Replicas) != 1 || snap.Replicas[0].Replica != "kube-system/coredns-a" || snap.Replicas[0].Err == nil ||
		!strings.Contains(snap.Replicas[0].Err.Error(), "pods/portforward in namespace kube-system") {
		t.Errorf("replicas %+v, want kube-system/coredns-a blind, naming the port-forward permission", snap.Replicas)
	}
}
