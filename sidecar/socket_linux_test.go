package sidecar

import (
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// jiffyMax is the coarsest kernel tick: HZ=100 makes a jiffy 10 ms, and
// tcpi_last_data_recv is counted in jiffies (net/ipv4/tcp.c tcp_get_info),
// so a data instant computed from it is off by at most one jiffy, plus the
// dump's own duration (the kernel's "now" falls inside the dump).
const jiffyMax = 10 * time.Millisecond

// loopbackApp is a real TCP server on 127.0.0.1: the app. Its accepts are
// counted, and stand for /proc/net/snmp's PassiveOpens, which in this
// shared host namespace every other process moves too (TestPassiveOpensCounter
// reads the real one).
type loopbackApp struct {
	ln       *net.TCPListener
	port     uint16
	accepted chan *net.TCPConn
	n        atomic.Uint64
}

func newLoopbackApp(t *testing.T) *loopbackApp {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	a := &loopbackApp{ln: ln, port: uint16(ln.Addr().(*net.TCPAddr).Port), accepted: make(chan *net.TCPConn, 16)}
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			a.n.Add(1)
			a.accepted <- c
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return a
}

// dial connects from peer (a 127/8 address, so each client is its own
// peer) and returns both ends.
func (a *loopbackApp) dial(t *testing.T, peer string) (client, server *net.TCPConn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(peer)}}
	c, err := d.Dial("tcp4", a.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	select {
	case s := <-a.accepted:
		t.Cleanup(func() { s.Close() })
		return c.(*net.TCPConn), s
	case <-time.After(5 * time.Second):
		t.Fatal("no accept within 5 s")
	}
	return nil, nil
}

func newKernelSidecar(t *testing.T, a *loopbackApp) *Sidecar {
	t.Helper()
	dump, closeDump, err := KernelDumper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeDump)
	return New(Config{Ports: []int{int(a.port)}, Interval: DefaultInterval, PodName: "app", MaxPeers: 16,
		Dump: dump, PassiveOpens: func() (uint64, error) { return a.n.Load(), nil }}, 0)
}

func peerOf(tl Timeline, addr string) *Peer {
	for i := range tl.Peers {
		if tl.Peers[i].Addr == addr {
			return &tl.Peers[i]
		}
	}
	return nil
}

// send writes b and waits until the server end has read it all: the
// kernel has received it by then.
func send(t *testing.T, client, server *net.TCPConn, b string) (sent, received time.Time) {
	t.Helper()
	sent = time.Now()
	if _, err := client.Write([]byte(b)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(b))
	if _, err := io.ReadFull(server, buf); err != nil {
		t.Fatal(err)
	}
	return sent, time.Now()
}

// waitState polls the kernel until the app-side socket of client's
// connection is in state, within 5 s.
func waitState(t *testing.T, a *loopbackApp, client *net.TCPConn, state uint8) {
	t.Helper()
	dump, closeDump, err := KernelDumper()
	if err != nil {
		t.Fatal(err)
	}
	defer closeDump()
	remote := client.LocalAddr().(*net.TCPAddr).AddrPort()
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		socks, _, err := dump(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range socks {
			if s.Local.Port() == a.port && s.Remote == remote && s.State == state {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the app's end of %s never reached state %d", remote, state)
}

// The reader sees each connection's peer and the instant of its last data
// within jiffyMax plus the dump's duration, in any way the connection ends.
func TestKernelConnectionsAndData(t *testing.T) {
	a := newLoopbackApp(t)
	s := newKernelSidecar(t, a)
	s.Poll() // baseline
	tl := s.Timeline()
	if tl.ListenerOpen == nil || tl.Poll.Errors != 0 {
		t.Fatalf("baseline: listener_open %v, poll %+v", tl.ListenerOpen, tl.Poll)
	}

	// A: connects and sends; polled while established.
	ca, sa := a.dial(t, "127.0.0.2")
	sent, received := send(t, ca, sa, "GET / HTTP/1.1\r\n\r\n")
	s.Poll()
	tl = s.Timeline()
	p := peerOf(tl, "127.0.0.2")
	if tl.Accepts != 1 || p == nil || p.Accepts != 1 || p.LastRequest == nil {
		t.Fatalf("after A: accepts %d, peer %+v", tl.Accepts, p)
	}
	read := time.Duration(tl.Poll.MaxReadNS)
	if lr := *p.LastRequest; lr.Before(sent.Add(-jiffyMax)) || lr.After(received.Add(read+jiffyMax)) {
		t.Errorf("A's last_request %v outside [%v - %v, %v + %v + %v]", lr, sent, jiffyMax, received, read, jiffyMax)
	}
	if la := *p.LastAccept; la.Before(sent) || la.After(*tl.LastPoll) {
		t.Errorf("A's last_accept %v outside [%v, %v]", la, sent, *tl.LastPoll)
	}
	// Idle: last_request does not move.
	first := *p.LastRequest
	s.Poll()
	if got := peerOf(s.Timeline(), "127.0.0.2").LastRequest; !got.Equal(first) {
		t.Errorf("idle connection moved last_request from %v to %v", first, got)
	}

	// B: the app closes first, and the connection reaches TIME_WAIT on the
	// app's side before any poll: seen there, once.
	cb, sb := a.dial(t, "127.0.0.3")
	send(t, cb, sb, "x")
	sb.Close()
	if _, err := io.ReadAll(cb); err != nil {
		t.Fatal(err)
	}
	cb.Close()
	waitState(t, a, cb, StateTimeWait)
	s.Poll()
	s.Poll()
	tl = s.Timeline()
	if p := peerOf(tl, "127.0.0.3"); tl.Accepts != 2 || p == nil || p.Accepts != 1 {
		t.Fatalf("after B (TIME_WAIT only): accepts %d, peer %+v", tl.Accepts, p)
	}

	// C: polled established, then the app closes first: its TIME_WAIT entry
	// keeps the socket cookie, so it is not counted again.
	cc, sc := a.dial(t, "127.0.0.4")
	send(t, cc, sc, "y")
	s.Poll()
	sc.Close()
	io.ReadAll(cc)
	cc.Close()
	waitState(t, a, cc, StateTimeWait)
	s.Poll()
	// D: polled established, then the client closes first: the app's end
	// goes through CLOSE_WAIT and LAST_ACK and leaves no TIME_WAIT.
	cd, sd := a.dial(t, "127.0.0.5")
	send(t, cd, sd, "z")
	s.Poll()
	cd.Close()
	io.ReadAll(sd)
	sd.Close()
	s.Poll()
	tl = s.Timeline()
	if tl.Accepts != 4 || tl.UnseenConnections == nil || *tl.UnseenConnections != 0 {
		t.Fatalf("every connection polled: accepts %d unseen %v, want 4 and 0", tl.Accepts, tl.UnseenConnections)
	}
	for _, peer := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		if p := peerOf(tl, peer); p == nil || p.Accepts != 1 || p.LastRequest == nil && peer != "127.0.0.3" {
			t.Errorf("peer %s: %+v", peer, p)
		}
	}

	// E and F open and go between two polls: the app resets them (SO_LINGER
	// 0), which removes its socket at once with no TIME_WAIT. Unseen.
	for _, peer := range []string{"127.0.0.6", "127.0.0.7"} {
		_, se := a.dial(t, peer)
		se.SetLinger(0)
		se.Close()
	}
	s.Poll()
	tl = s.Timeline()
	if tl.Accepts != 4 || *tl.UnseenConnections != 2 || peerOf(tl, "127.0.0.6") != nil {
		t.Errorf("two reset between polls: accepts %d unseen %d, want 4 and 2", tl.Accepts, *tl.UnseenConnections)
	}
}

// The app's listener closing is stamped at the first poll without it, and
// the last poll with it bounds the close from below.
func TestKernelListenerClosed(t *testing.T) {
	a := newLoopbackApp(t)
	s := newKernelSidecar(t, a)
	s.Poll()
	s.Poll()
	before := time.Now()
	a.ln.Close()
	s.Poll()
	tl := s.Timeline()
	if tl.ListenerClosed == nil || tl.ListenerClosed.Before(before) {
		t.Fatalf("listener_closed %v, want after %v", tl.ListenerClosed, before)
	}
	l := tl.Listeners[0]
	if l.LastSeen == nil || !l.LastSeen.Before(before) || !l.Closed.Equal(*tl.ListenerClosed) {
		t.Errorf("listener %+v", l)
	}
}

// /proc/net/snmp's PassiveOpens counts the connections this test's server
// accepts (at least those: other processes share the namespace).
func TestPassiveOpensCounter(t *testing.T) {
	before, err := ReadPassiveOpens(DefaultSNMPPath)
	if err != nil {
		t.Fatal(err)
	}
	a := newLoopbackApp(t)
	for range 3 {
		a.dial(t, "127.0.0.1")
	}
	after, err := ReadPassiveOpens(DefaultSNMPPath)
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 3 {
		t.Errorf("PassiveOpens moved by %d after 3 accepts", after-before)
	}
}
