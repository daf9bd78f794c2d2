package probe

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ptr(t time.Time) *time.Time { return &t }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// eqTime compares an optional instant with a wanted one (nil: unset).
func eqTime(t *testing.T, name string, got, want *time.Time) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Errorf("%s = %v, want %v", name, got, want)
	case !got.Equal(*want):
		t.Errorf("%s = %s, want %s", name, got, want)
	}
}

func eqInt(t *testing.T, name string, got, want int64) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %d, want %d", name, got, want)
	}
}

func TestRecorderTrafficVersusControl(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r := NewRecorder(clk, "p", 0, 16)

	clk.SetTime(at(1 * time.Second))
	a := r.Accept(addr("10.0.0.1"))
	clk.SetTime(at(2 * time.Second))
	r.Request(a, true)
	clk.SetTime(at(3 * time.Second))
	r.Request(a, false) // a /timeline on a traffic connection

	// Same peer IP, another connection (port), control only: the kubelet's
	// /healthz must not make a traffic accept.
	clk.SetTime(at(4 * time.Second))
	b := r.Accept(addr("10.0.0.1"))
	clk.SetTime(at(5 * time.Second))
	r.Request(b, false)

	// A connection with no request at all (a TCP check).
	clk.SetTime(at(6 * time.Second))
	r.Accept(addr("10.0.0.2"))

	clk.SetTime(at(7 * time.Second))
	tl := r.Timeline()
	eqTime(t, "Now", &tl.Now, ptr(at(7*time.Second)))
	eqTime(t, "Started", &tl.Started, ptr(t0))
	eqInt(t, "Accepts", tl.Accepts, 3)
	eqInt(t, "Requests", tl.Requests, 3)
	eqInt(t, "TrafficAccepts", tl.TrafficAccepts, 1)
	eqInt(t, "TrafficRequests", tl.TrafficRequests, 1)
	eqTime(t, "FirstAccept", tl.FirstAccept, ptr(at(1*time.Second)))
	eqTime(t, "LastAccept", tl.LastAccept, ptr(at(6*time.Second)))
	eqTime(t, "LastRequest", tl.LastRequest, ptr(at(5*time.Second)))
	eqTime(t, "LastTrafficAccept", tl.LastTrafficAccept, ptr(at(1*time.Second)))
	eqTime(t, "LastTrafficRequest", tl.LastTrafficRequest, ptr(at(2*time.Second)))
	eqTime(t, "Sigterm", tl.Sigterm, nil)
	eqInt(t, "AcceptsAfterSigterm", tl.AcceptsAfterSigterm, 0)

	if len(tl.Peers) != 2 {
		t.Fatalf("Peers = %+v, want 2 peers", tl.Peers)
	}
	p1, p2 := tl.Peers[0], tl.Peers[1]
	if p1.Addr != "10.0.0.1" || p2.Addr != "10.0.0.2" {
		t.Fatalf("peer order = %s, %s; want 10.0.0.1 (has traffic) first", p1.Addr, p2.Addr)
	}
	eqInt(t, "peer1.Accepts", p1.Accepts, 2)
	eqInt(t, "peer1.Requests", p1.Requests, 3)
	eqInt(t, "peer1.TrafficRequests", p1.TrafficRequests, 1)
	eqTime(t, "peer1.LastAccept", p1.LastAccept, ptr(at(4*time.Second)))
	eqTime(t, "peer1.LastRequest", p1.LastRequest, ptr(at(5*time.Second)))
	eqTime(t, "peer1.LastTrafficAccept", p1.LastTrafficAccept, ptr(at(1*time.Second)))
	eqTime(t, "peer1.LastTrafficRequest", p1.LastTrafficRequest, ptr(at(2*time.Second)))
	eqInt(t, "peer2.Accepts", p2.Accepts, 1)
	eqInt(t, "peer2.Requests", p2.Requests, 0)
	eqTime(t, "peer2.LastRequest", p2.LastRequest, nil)
}

func TestRecorderAfterSigterm(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r := NewRecorder(clk, "p", 0, 16)

	clk.SetTime(at(1 * time.Second))
	keep := r.Accept(addr("10.0.0.1")) // a keep-alive connection from before
	r.Request(keep, true)
	idle := r.Accept(addr("10.0.0.1")) // opened before, first traffic after

	clk.SetTime(at(10 * time.Second))
	if _, first := r.Sigterm(); !first {
		t.Fatal("first Sigterm not reported first")
	}
	clk.SetTime(at(11 * time.Second))
	if _, first := r.Sigterm(); first {
		t.Fatal("second Sigterm reported first")
	}

	clk.SetTime(at(12 * time.Second))
	r.Request(keep, true) // request after, accept before
	clk.SetTime(at(13 * time.Second))
	r.Request(idle, true)
	clk.SetTime(at(14 * time.Second))
	fresh := r.Accept(addr("10.0.0.2"))
	clk.SetTime(at(15 * time.Second))
	r.Request(fresh, true)
	r.Request(fresh, true)
	clk.SetTime(at(16 * time.Second))
	hc := r.Accept(addr("10.0.0.3"))
	r.Request(hc, false)

	tl := r.Timeline()
	eqTime(t, "Sigterm", tl.Sigterm, ptr(at(10*time.Second)))
	eqInt(t, "Accepts", tl.Accepts, 4)
	eqInt(t, "AcceptsAfterSigterm", tl.AcceptsAfterSigterm, 2)
	eqInt(t, "Requests", tl.Requests, 6)
	eqInt(t, "RequestsAfterSigterm", tl.RequestsAfterSigterm, 5)
	eqInt(t, "TrafficAccepts", tl.TrafficAccepts, 3)
	eqInt(t, "TrafficAcceptsAfterSigterm", tl.TrafficAcceptsAfterSigterm, 1)
	eqInt(t, "TrafficRequests", tl.TrafficRequests, 5)
	eqInt(t, "TrafficRequestsAfterSigterm", tl.TrafficRequestsAfterSigterm, 4)
	eqTime(t, "LastTrafficAccept", tl.LastTrafficAccept, ptr(at(14*time.Second)))
	eqTime(t, "LastTrafficRequest", tl.LastTrafficRequest, ptr(at(15*time.Second)))
	eqTime(t, "LastAccept", tl.LastAccept, ptr(at(16*time.Second)))
	if got := tl.Peers[0].Addr; got != "10.0.0.2" {
		t.Errorf("Peers[0] = %s, want 10.0.0.2 (latest traffic)", got)
	}
}

// A connection accepted early whose first traffic request comes after a
// later-accepted connection's must not move LastTrafficAccept backwards.
func TestRecorderLastTrafficAcceptNeverMovesBack(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r := NewRecorder(clk, "p", 0, 16)
	clk.SetTime(at(1 * time.Second))
	early := r.Accept(addr("10.0.0.1"))
	clk.SetTime(at(2 * time.Second))
	late := r.Accept(addr("10.0.0.1"))
	clk.SetTime(at(3 * time.Second))
	r.Request(late, true)
	clk.SetTime(at(4 * time.Second))
	r.Request(early, true)

	tl := r.Timeline()
	eqTime(t, "LastTrafficAccept", tl.LastTrafficAccept, ptr(at(2*time.Second)))
	eqTime(t, "peer.LastTrafficAccept", tl.Peers[0].LastTrafficAccept, ptr(at(2*time.Second)))
	eqInt(t, "TrafficAccepts", tl.TrafficAccepts, 2)
}

func TestRecorderPeerCap(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r := NewRecorder(clk, "p", 0, 2)
	// Many connections from two peers: no growth past two records.
	for i := 0; i < 1000; i++ {
		c := r.Accept(addr("10.0.0.1"))
		r.Request(c, true)
		c = r.Accept(addr("10.0.0.2"))
		r.Request(c, true)
	}
	// An IPv4-mapped IPv6 address is the same peer as the IPv4 one.
	r.Accept(addr("::ffff:10.0.0.1"))
	// Two more peers: beyond the cap, counted in totals and overflow only.
	for _, a := range []string{"10.0.0.3", "10.0.0.4", "10.0.0.3"} {
		c := r.Accept(addr(a))
		r.Request(c, true)
	}

	tl := r.Timeline()
	if len(tl.Peers) != 2 {
		t.Fatalf("len(Peers) = %d, want the cap, 2", len(tl.Peers))
	}
	eqInt(t, "PeersOverflow", tl.PeersOverflow, 3)
	eqInt(t, "Accepts", tl.Accepts, 2004)
	eqInt(t, "TrafficRequests", tl.TrafficRequests, 2003)
	eqInt(t, "TrafficAccepts", tl.TrafficAccepts, 2003)
	var peerAccepts int64
	for _, p := range tl.Peers {
		peerAccepts += p.Accepts
	}
	eqInt(t, "sum of peer accepts", peerAccepts, 2001)
}

func TestRecorderZeroPeers(t *testing.T) {
	r := NewRecorder(clocktesting.NewFakeClock(t0), "p", 0, 0)
	c := r.Accept(addr("10.0.0.1"))
	r.Request(c, true)
	tl := r.Timeline()
	if tl.Peers != nil {
		t.Errorf("Peers = %+v, want none with a cap of 0", tl.Peers)
	}
	eqInt(t, "PeersOverflow", tl.PeersOverflow, 1)
	eqInt(t, "TrafficAccepts", tl.TrafficAccepts, 1)
}

func TestRecorderClockOffset(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	const off = -90 * time.Minute
	r := NewRecorder(clk, "p", off, 16)
	clk.SetTime(at(time.Second))
	c := r.Accept(addr("10.0.0.1"))
	r.Request(c, true)
	r.Prestop()
	r.Sigterm()
	r.Release()
	r.Exit()

	tl := r.Timeline()
	want := ptr(at(time.Second).Add(off))
	eqInt(t, "ClockOffsetNS", tl.ClockOffsetNS, int64(off))
	eqTime(t, "Started", &tl.Started, ptr(t0.Add(off)))
	eqTime(t, "Now", &tl.Now, want)
	for name, got := range map[string]*time.Time{
		"LastAccept": tl.LastAccept, "LastTrafficRequest": tl.LastTrafficRequest,
		"PrestopCalled": tl.PrestopCalled, "Sigterm": tl.Sigterm, "Released": tl.Released,
		"Exit": tl.Exit, "peer.LastTrafficAccept": tl.Peers[0].LastTrafficAccept,
	} {
		eqTime(t, name, got, want)
	}
}

func TestRecorderStartupInstants(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r := NewRecorder(clk, "p", time.Minute, 16)
	tl := r.Timeline()
	eqTime(t, "ListenerOpen before it opens", tl.ListenerOpen, nil)
	eqTime(t, "FirstTrafficRequest before any", tl.FirstTrafficRequest, nil)

	clk.SetTime(at(3 * time.Second))
	r.ListenerOpen()
	clk.SetTime(at(4 * time.Second))
	r.ListenerOpen() // first call wins
	c := r.Accept(addr("10.0.0.1"))
	r.Request(c, false) // the readiness probe: not traffic
	clk.SetTime(at(5 * time.Second))
	r.Request(c, true)
	clk.SetTime(at(6 * time.Second))
	r.Request(c, true)

	tl = r.Timeline()
	eqTime(t, "Started", &tl.Started, ptr(at(time.Minute)))
	eqTime(t, "ListenerOpen", tl.ListenerOpen, ptr(at(3*time.Second+time.Minute)))
	eqTime(t, "FirstTrafficRequest", tl.FirstTrafficRequest, ptr(at(5*time.Second+time.Minute)))
	eqTime(t, "LastTrafficRequest", tl.LastTrafficRequest, ptr(at(6*time.Second+time.Minute)))
}

func TestEarlierOf(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cur, at, want time.Time
	}{
		{"none yet", time.Time{}, at(2), at(2)},
		{"earlier wins", at(2), at(1), at(1)},
		{"later is ignored", at(1), at(2), at(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := earlierOf(tc.cur, tc.at); !got.Equal(tc.want) {
				t.Errorf("earlierOf(%s, %s) = %s, want %s", tc.cur, tc.at, got, tc.want)
			}
		})
	}
}

func TestRecorderFirstCallWins(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	r := NewRecorder(clk, "p", 0, 16)
	clk.SetTime(at(1 * time.Second))
	if _, first := r.Prestop(); !first {
		t.Error("first Prestop not first")
	}
	clk.SetTime(at(2 * time.Second))
	if _, first := r.Prestop(); first {
		t.Error("second Prestop reported first")
	}
	if _, first := r.Release(); !first {
		t.Error("first Release not first")
	}
	clk.SetTime(at(3 * time.Second))
	if _, first := r.Release(); first {
		t.Error("second Release reported first")
	}
	r.HoldExpired()
	clk.SetTime(at(4 * time.Second))
	r.HoldExpired()
	r.Exit()
	clk.SetTime(at(5 * time.Second))
	r.Exit()

	tl := r.Timeline()
	eqTime(t, "PrestopCalled", tl.PrestopCalled, ptr(at(1*time.Second)))
	eqInt(t, "PrestopCalls", tl.PrestopCalls, 2)
	eqTime(t, "Released", tl.Released, ptr(at(2*time.Second)))
	eqTime(t, "HoldExpired", tl.HoldExpired, ptr(at(3*time.Second)))
	eqTime(t, "Exit", tl.Exit, ptr(at(4*time.Second)))
}

func BenchmarkRecorderRequest(b *testing.B) {
	r := NewRecorder(clock.RealClock{}, "p", 0, DefaultMaxPeers)
	c := r.Accept(addr("10.0.0.1"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Request(c, true)
		}
	})
}
