package load

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	grpcdns "google.golang.org/grpc/resolver/dns"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/internal/dnstest"
	"github.com/epwindow/epwindow/probe"
)

// grpcProbe is a probe whose gRPC port (--grpc-listen) is at addr.
type grpcProbe struct {
	addr   netip.AddrPort
	cancel context.CancelFunc
	done   chan error
}

// serveGRPCProbes runs one probe per loopback address, all on one port
// (as pods of a headless Service are: one port, their own addresses), with
// the gRPC port's connection age.
func serveGRPCProbes(t *testing.T, age, grace time.Duration, ips ...netip.Addr) []*grpcProbe {
	t.Helper()
	var lns []net.Listener
	for attempt := 0; len(lns) < len(ips); attempt++ {
		if attempt == 20 {
			t.Fatal("no port free on every loopback address")
		}
		for _, ln := range lns {
			ln.Close()
		}
		lns = nil
		port := "0"
		for _, ip := range ips {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
			port = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		}
	}
	var out []*grpcProbe
	for i, gln := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := probe.Config{Listen: "unused", PodName: "pod-" + strconv.Itoa(i), Hold: time.Minute, ShutdownTimeout: 5 * time.Second,
			TerminationLog: filepath.Join(t.TempDir(), "tl"), StreamInterval: time.Second, MaxStreamRecords: probe.DefaultMaxStreamRecords,
			MaxPeers: probe.DefaultMaxPeers, GRPCListener: gln, GRPCMaxConnectionAge: age, GRPCMaxConnectionAgeGrace: grace}
		ctx, cancel := context.WithCancel(context.Background())
		p := &grpcProbe{addr: gln.Addr().(*net.TCPAddr).AddrPort(), cancel: cancel, done: make(chan error, 1)}
		go func() { p.done <- probe.Serve(ctx, ln, cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
		t.Cleanup(p.stop)
		out = append(out, p)
	}
	return out
}

// stop ends the probe at once: grpc-go's Server.Stop closes its
// connections without GOAWAY, as a process that exits does.
func (p *grpcProbe) stop() {
	if p.cancel != nil {
		p.cancel()
		<-p.done
		p.cancel = nil
	}
}

// shortResolution lowers grpc-go's dns re-resolution floor (30 s,
// MinResolutionInterval) for the test, so that a re-resolution follows a
// lost connection in milliseconds; the tool keeps grpc-go's default.
func shortResolution(t *testing.T, d time.Duration) {
	grpcdns.SetMinResolutionInterval(d)
	t.Cleanup(func() { grpcdns.SetMinResolutionInterval(30 * time.Second) })
}

const grpcTestName = "probe-headless.ns.svc.cluster.local"

// grpcLoadOnBoth runs two probes at a and b (with the gRPC port's
// connection age), a DNS server answering both for the headless name, and
// the gRPC load resolving it, until both pods have answered calls.
func grpcLoadOnBoth(t *testing.T, age, grace time.Duration, a, b netip.Addr) ([]*grpcProbe, *dnstest.Zone, *Generator, func()) {
	t.Helper()
	ps := serveGRPCProbes(t, age, grace, a, b)
	z := &dnstest.Zone{Name: grpcTestName + ".", Addrs: []netip.Addr{a, b}, TTL: 1}
	target := "dns://" + dnstest.Serve(t, z) + "/" + grpcTestName + ":" + strconv.Itoa(int(ps[0].addr.Port()))
	g, err := New(Config{URL: target, Rate: 200, Timeout: 2 * time.Second}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, g)
	eventually(t, "calls answered by both pods", func() bool {
		_, okA := g.Pod("pod-0")
		_, okB := g.Pod("pod-1")
		return okA && okB
	})
	return ps, z, g, stop
}

func lastCall(t *testing.T, g *Generator, pod string) PodStats {
	t.Helper()
	ps, ok := g.Pod(pod)
	if !ok {
		t.Fatalf("no call answered by %s", pod)
	}
	return ps
}

// Without a connection's end, grpc-go's client does not ask DNS again: a
// pod whose address left the answer is called as long as its connection
// lasts, and left when that connection is lost (the re-resolution it
// triggers then drops the address).
func TestGRPCLoadLeavesAPodWhenItsConnectionEnds(t *testing.T) {
	shortResolution(t, 100*time.Millisecond)
	a, b := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	ps, z, g, stop := grpcLoadOnBoth(t, 0, 0, a, b)
	z.Set(a)
	dropped := time.Now()
	// 600 ms at 200 calls/s: about 60 calls to pod-1 if it is still used.
	time.Sleep(600 * time.Millisecond)
	if last := lastCall(t, g, "pod-1").LastSent; last.Sub(dropped) < 400*time.Millisecond {
		t.Errorf("pod-1's last call %s after DNS dropped it, want calls on for the 600 ms its connection lasted", last.Sub(dropped))
	}
	stopping := time.Now()
	ps[1].stop()
	stopped := time.Now()
	addrB := ps[1].addr.String()
	eventually(t, "a DNS answer without pod-1", func() bool {
		l, _ := g.GRPCLog()
		_, ok := l.FirstWithout(addrB, stopped)
		return ok
	})
	time.Sleep(200 * time.Millisecond)
	stop()

	last := lastCall(t, g, "pod-1")
	if last.LastSent.After(stopped) {
		t.Errorf("pod-1 answered a call sent %s after its server stopped", last.LastSent.Sub(stopped))
	}
	if last.Addr != addrB {
		t.Errorf("pod-1's calls came from %q, want %s", last.Addr, addrB)
	}
	l, _ := g.GRPCLog()
	c, ok := l.ConnAt(addrB, last.LastSent)
	if !ok || (c.End != ConnEndEOF && c.End != ConnEndReset) || !c.GoAway.IsZero() {
		t.Errorf("the connection of pod-1's last call: %+v (found %v), want one closed without GOAWAY", c, ok)
	}
	if !strings.Contains(l.Mechanism(addrB, last.LastSent), "without GOAWAY") && !strings.Contains(l.Mechanism(addrB, last.LastSent), "reset") {
		t.Errorf("mechanism %q", l.Mechanism(addrB, last.LastSent))
	}
	if len(l.ResolveNow) == 0 || l.ResolveNow[0].Before(stopping) {
		t.Errorf("re-resolutions asked at %v, want the first after pod-1's server was stopped (%v)", l.ResolveNow, stopping)
	}
	if first := l.Resolutions[0]; len(first.Addrs) != 2 {
		t.Errorf("first answer %+v, want both addresses", first)
	}

	// A runner serves the same: the log and each pod's address in /stats.
	cfg := RunnerConfig{Load: g.cfg, StatsListen: ":0", Deadline: time.Now().Add(time.Hour)}
	rec := httptest.NewRecorder()
	StatsHandler(g, nil, cfg, clock.RealClock{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathStats, nil))
	st, err := ParseStats(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if st.GRPC == nil || len(st.GRPC.Conns) != len(l.Conns) || len(st.GRPC.Resolutions) != len(l.Resolutions) {
		t.Errorf("/stats grpc log %+v, want the generator's %+v", st.GRPC, l)
	}
	for _, p := range st.Pods {
		if p.Pod == "pod-1" && p.Addr != addrB {
			t.Errorf("/stats: pod-1 at %q, want %s", p.Addr, addrB)
		}
	}
}

// With MaxConnectionAge on the server, its GOAWAY makes the client
// re-resolve, and the answer without the pod's address makes it close the
// pod's subchannel: the pod is left within one age of DNS dropping it.
func TestGRPCLoadMaxConnectionAgeBoundsTheStay(t *testing.T) {
	// The age is grpc-go's ±10% jitter about 300 ms
	// (internal/transport/http2_server.go keepalive); the grace only
	// bounds calls in flight, which last microseconds here.
	const age, grace, interval = 300 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond
	shortResolution(t, interval)
	a, b := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.3")
	ps, z, g, stop := grpcLoadOnBoth(t, age, grace, a, b)
	z.Set(a)
	dropped := time.Now()
	addrB := ps[1].addr.String()
	var gone Resolution
	eventually(t, "a DNS answer without pod-1", func() bool {
		l, _ := g.GRPCLog()
		var ok bool
		gone, ok = l.FirstWithout(addrB, dropped)
		return ok
	})
	time.Sleep(300 * time.Millisecond)
	stop()

	// The answer came after the next GOAWAY to either pod (≤ 1.1 age) and
	// the re-resolution floor; 500 ms more for a loaded machine's
	// scheduling of the resolver's goroutine.
	if d := gone.At.Sub(dropped); d > age*11/10+interval+500*time.Millisecond {
		t.Errorf("the client learned %s after DNS dropped pod-1, want within one connection age (%s) and the floor", d, age)
	}
	last := lastCall(t, g, "pod-1")
	// A call picked just before the subchannel closed may still be sent on
	// it: 50 ms.
	if last.LastSent.After(gone.At.Add(50 * time.Millisecond)) {
		t.Errorf("pod-1's last call %s after the answer without it", last.LastSent.Sub(gone.At))
	}
	l, _ := g.GRPCLog()
	var goaways int
	for _, c := range l.Conns {
		if c.End == ConnEndGoaway && c.GoAwayCode == "NO_ERROR" {
			goaways++
		}
	}
	if goaways == 0 {
		t.Errorf("no connection ended by GOAWAY NO_ERROR in %+v", l.Conns)
	}
	if m := l.Mechanism(addrB, last.LastSent); !strings.Contains(m, "GOAWAY") {
		t.Errorf("mechanism %q, want it to name the GOAWAY that made the client re-resolve", m)
	}
}

func TestGRPCLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "dns:///name", Rate: 1}, "dns:///NAME:PORT"},
		{Config{URL: "dns:///name:80", Rate: 1, Method: "POST"}, "--load-method"},
		{Config{URL: "grpc://name:80", Rate: 1}, "scheme"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate = %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

// A runner's second load (--grpc-url): its calls reach the pods by DNS and
// /stats reports them per pod with the client's log, beside the main load.
func TestRunnerGRPCClient(t *testing.T) {
	a, b := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.4")
	ps := serveGRPCProbes(t, 0, 0, a, b)
	z := &dnstest.Zone{Name: grpcTestName + ".", Addrs: []netip.Addr{a, b}, TTL: 1}
	target := "dns://" + dnstest.Serve(t, z) + "/" + grpcTestName + ":" + strconv.Itoa(int(ps[0].addr.Port()))
	cfg := RunnerConfig{Load: Config{URL: target, Rate: 20}, GRPC: &Config{URL: target, Rate: 100}, GRPCWaitAddrs: 2,
		StatsListen: "127.0.0.1:0", Deadline: time.Now().Add(time.Minute)}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- RunRunner(ctx, cfg, clock.RealClock{}, func(a net.Addr) { addr <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	statsURL := "http://" + (<-addr).String() + PathStats
	var st Stats
	eventually(t, "the runner's gRPC client answered by both pods", func() bool {
		resp, err := http.Get(statsURL)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if st, err = ParseStats(body); err != nil || st.GRPCClient == nil {
			return false
		}
		return len(st.GRPCClient.Pods) == 2
	})
	c := st.GRPCClient
	if c.Target != target || c.OK == 0 || len(c.Log.Resolutions) == 0 || len(c.Log.Conns) < 2 {
		t.Errorf("grpc client stats %+v", c)
	}
	for _, p := range c.Pods {
		if p.Addr == "" || p.Responses == 0 {
			t.Errorf("pod report %+v: want the pod's address and its responses", p)
		}
	}

	bad := cfg
	bad.GRPC = &Config{URL: "http://x/", Rate: 1}
	if err := bad.Validate(time.Now()); err == nil || !strings.Contains(err.Error(), "--grpc-url") {
		t.Errorf("an http --grpc-url: %v", err)
	}
}

// waitAddrs holds a client back until DNS answers enough addresses.
func TestWaitAddrs(t *testing.T) {
	a, b := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.6")
	z := &dnstest.Zone{Name: grpcTestName + ".", Addrs: []netip.Addr{a}, TTL: 1}
	target := "dns://" + dnstest.Serve(t, z) + "/" + grpcTestName + ":8081"
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if waitAddrs(ctx, target, 2) {
		t.Fatal("waitAddrs returned with one address of two")
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		z.Set(a, b)
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if !waitAddrs(ctx2, target, 2) {
		t.Fatal("waitAddrs did not return once DNS answered both addresses")
	}
}
