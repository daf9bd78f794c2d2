package sidecar

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// ms is t0 plus n milliseconds.
func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func listen(port string) Socket {
	return Socket{Local: ap("0.0.0.0:" + port), Remote: ap("0.0.0.0:0"), State: StateListen, Cookie: 1}
}

// est is an established connection from peer to the app's port 8080.
func est(peer string, cookie, bytes uint64, lastRecv time.Duration) Socket {
	return Socket{Local: ap("10.0.0.5:8080"), Remote: ap(peer), Cookie: cookie, State: StateEstablished,
		Info: true, BytesReceived: bytes, LastDataRecv: lastRecv}
}

func tw(peer string, cookie uint64) Socket {
	return Socket{Local: ap("10.0.0.5:8080"), Remote: ap(peer), Cookie: cookie, State: StateTimeWait}
}

// observe feeds one dump ending at end (read 1 ms) with passive opens po.
func observe(tr *Tracker, end time.Time, po uint64, socks ...Socket) {
	tr.Observe(Dump{Start: end.Add(-time.Millisecond), End: end, Sockets: socks, PassiveOpens: po})
}

func newTestTracker() *Tracker {
	return NewTracker("app-1", t0, 10*time.Millisecond, []uint16{8080}, 9091, 2)
}

func at(t *testing.T, what string, got *time.Time, want time.Time) {
	t.Helper()
	if got == nil || !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestTrackerAcceptsAndRequests(t *testing.T) {
	tr := newTestTracker()
	// Baseline: a connection open before the sidecar is known, not counted.
	observe(tr, ms(0), 100, listen("8080"), est("10.1.0.1:4000", 7, 50, 0))
	tl := tr.Timeline(ms(0))
	if tl.Accepts != 0 || tl.LastRequest != nil || *tl.UnseenConnections != 0 {
		t.Fatalf("baseline counted: %+v", tl)
	}
	at(t, "listener_open", tl.ListenerOpen, ms(0))

	// A new connection with 10 bytes received 3 ms before the dump's end.
	observe(tr, ms(10), 101, listen("8080"), est("10.1.0.1:4000", 7, 50, 0), est("10.1.0.2:5000", 8, 10, 3*time.Millisecond))
	tl = tr.Timeline(ms(10))
	if tl.Accepts != 1 || *tl.UnseenConnections != 0 {
		t.Fatalf("accepts %d unseen %d, want 1 and 0", tl.Accepts, *tl.UnseenConnections)
	}
	at(t, "last_accept", tl.LastAccept, ms(10))
	at(t, "last_request", tl.LastRequest, ms(7))

	// Idle: tcpi_last_data_recv grows, bytes do not: nothing moves.
	observe(tr, ms(20), 101, listen("8080"), est("10.1.0.1:4000", 7, 50, 20*time.Millisecond), est("10.1.0.2:5000", 8, 10, 13*time.Millisecond))
	tl = tr.Timeline(ms(20))
	at(t, "last_request (idle)", tl.LastRequest, ms(7))

	// The baseline connection receives data: a request, not an accept.
	observe(tr, ms(30), 101, listen("8080"), est("10.1.0.1:4000", 7, 90, 2*time.Millisecond), est("10.1.0.2:5000", 8, 10, 23*time.Millisecond))
	tl = tr.Timeline(ms(30))
	at(t, "last_request", tl.LastRequest, ms(28))
	if tl.Accepts != 1 {
		t.Errorf("accepts %d, want 1", tl.Accepts)
	}
	if len(tl.Peers) != 2 || tl.Peers[0].Addr != "10.1.0.1" || tl.Peers[0].Accepts != 0 || tl.Peers[1].Addr != "10.1.0.2" {
		t.Errorf("peers %+v, want 10.1.0.1 (latest, no accept) then 10.1.0.2", tl.Peers)
	}

	// The connection goes to TIME_WAIT (same cookie): not a new accept. A
	// new connection seen only in TIME_WAIT is one; so is the same 4-tuple
	// with a new cookie (reused after TIME_WAIT).
	observe(tr, ms(40), 103, listen("8080"), tw("10.1.0.2:5000", 8), tw("10.1.0.2:5001", 9))
	observe(tr, ms(50), 104, listen("8080"), est("10.1.0.2:5001", 10, 0, 0))
	tl = tr.Timeline(ms(50))
	if tl.Accepts != 3 || *tl.UnseenConnections != 1 {
		t.Errorf("accepts %d unseen %d, want 3 and 1", tl.Accepts, *tl.UnseenConnections)
	}
	at(t, "last_accept", tl.LastAccept, ms(50))
	at(t, "first_accept", tl.FirstAccept, ms(10))
	// No data on the new one (bytes 0): last_request stays.
	at(t, "last_request", tl.LastRequest, ms(28))
}

func TestTrackerPortsAndStates(t *testing.T) {
	tr := newTestTracker()
	metricsListen := listen("9100")
	observe(tr, ms(0), 0, listen("8080"), metricsListen, listen("9091"))
	observe(tr, ms(10), 6,
		listen("8080"), metricsListen, listen("9091"),
		// Another listening port's connection: counted apart.
		Socket{Local: ap("10.0.0.5:9100"), Remote: ap("10.1.0.9:3000"), Cookie: 20, State: StateEstablished, Info: true},
		// The sidecar's own port: its server counts those.
		Socket{Local: ap("10.0.0.5:9091"), Remote: ap("10.1.0.9:3001"), Cookie: 21, State: StateEstablished, Info: true},
		// The app dialling out (ephemeral local port, even to a peer's 8080).
		Socket{Local: ap("10.0.0.5:41000"), Remote: ap("10.2.0.1:8080"), Cookie: 22, State: StateEstablished, Info: true, BytesReceived: 5},
		Socket{Local: ap("10.0.0.5:41001"), Remote: ap("10.2.0.1:443"), Cookie: 23, State: StateSynSent},
		// A handshake not yet completed is no accept yet.
		Socket{Local: ap("10.0.0.5:8080"), Remote: ap("10.1.0.3:3002"), Cookie: 24, State: StateSynRecv},
	)
	tr.Observe(Dump{Start: ms(19), End: ms(20), PassiveOpens: 6, OwnAccepts: 3,
		Sockets: []Socket{listen("8080"), metricsListen, listen("9091")}})
	tl := tr.Timeline(ms(20))
	if tl.Accepts != 0 || tl.OtherAccepts != 1 || tl.OwnAccepts != 3 || tl.PassiveOpens != 6 || *tl.UnseenConnections != 2 {
		t.Errorf("accepts %d other %d own %d passive %d unseen %d, want 0 1 3 6 2",
			tl.Accepts, tl.OtherAccepts, tl.OwnAccepts, tl.PassiveOpens, *tl.UnseenConnections)
	}
	if len(tl.Peers) != 0 {
		t.Errorf("peers %+v, want none", tl.Peers)
	}
}

func TestTrackerListeners(t *testing.T) {
	tr := NewTracker("app-1", t0, 10*time.Millisecond, []uint16{8443, 8080}, 0, 10)
	observe(tr, ms(0), 0)                  // the app not listening yet
	observe(tr, ms(10), 0, listen("8080")) // one port of two
	observe(tr, ms(20), 0, listen("8080"), listen("8443"))
	observe(tr, ms(30), 0, listen("8080"), listen("8443"))
	observe(tr, ms(40), 0, listen("8080")) // 8443 closes first
	observe(tr, ms(50), 0)
	tl := tr.Timeline(ms(50))
	at(t, "listener_open", tl.ListenerOpen, ms(20))
	at(t, "listener_closed", tl.ListenerClosed, ms(40))
	if len(tl.Listeners) != 2 || tl.Listeners[0].Port != 8080 {
		t.Fatalf("listeners %+v", tl.Listeners)
	}
	l := tl.Listeners[0]
	at(t, "8080 open", l.Open, ms(10))
	at(t, "8080 last seen", l.LastSeen, ms(40))
	at(t, "8080 closed", l.Closed, ms(50))
	// Listening again (the container restarted) clears the port's close;
	// the pod's first close stays.
	observe(tr, ms(60), 0, listen("8080"), listen("8443"))
	tl = tr.Timeline(ms(60))
	if tl.Listeners[0].Closed != nil {
		t.Errorf("8080 closed %v after it listens again", tl.Listeners[0].Closed)
	}
	at(t, "listener_closed", tl.ListenerClosed, ms(40))
}

func TestTrackerInterruptedAndErrors(t *testing.T) {
	tr := newTestTracker()
	observe(tr, ms(0), 0, listen("8080"))
	observe(tr, ms(10), 1, listen("8080"), est("10.1.0.1:4000", 7, 0, 0))
	// An interrupted dump missing the connection: it is kept, so the next
	// dump does not count it again.
	tr.Observe(Dump{Start: ms(19), End: ms(20), Interrupted: true, PassiveOpens: 1, Sockets: []Socket{listen("8080")}})
	tr.Observe(Dump{Start: ms(25), End: ms(30), Err: errors.New("netlink: boom")})
	observe(tr, ms(40), 1, listen("8080"), est("10.1.0.1:4000", 7, 0, 0))
	tl := tr.Timeline(ms(40))
	if tl.Accepts != 1 || tl.Poll.Interrupted != 1 || tl.Poll.Errors != 1 || !strings.Contains(tl.Poll.LastError, "boom") {
		t.Errorf("accepts %d poll %+v", tl.Accepts, tl.Poll)
	}
	if tl.Poll.Polls != 5 || tl.Poll.MaxGapNS != int64(20*time.Millisecond) || tl.Poll.MaxReadNS != int64(time.Millisecond) {
		t.Errorf("poll figures %+v", tl.Poll)
	}
	// The counter unreadable: no unseen count, and why.
	tr.Observe(Dump{Start: ms(49), End: ms(50), PassiveOpensErr: errors.New("open /proc/net/snmp: denied"), Sockets: []Socket{listen("8080")}})
	tl = tr.Timeline(ms(50))
	if tl.PassiveOpensError == "" {
		t.Errorf("passive opens error not reported")
	}
}

func TestTrackerPeerCap(t *testing.T) {
	tr := newTestTracker() // 2 peers at most
	observe(tr, ms(0), 0, listen("8080"))
	observe(tr, ms(10), 3, listen("8080"), est("10.1.0.1:1", 1, 0, 0), est("10.1.0.2:1", 2, 0, 0), est("10.1.0.3:1", 3, 0, 0))
	tl := tr.Timeline(ms(10))
	if len(tl.Peers) != 2 || tl.PeersOverflow != 1 || tl.Accepts != 3 {
		t.Errorf("peers %d overflow %d accepts %d, want 2 1 3", len(tl.Peers), tl.PeersOverflow, tl.Accepts)
	}
}

func TestParsePassiveOpens(t *testing.T) {
	const snmp = `Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails
Tcp: 1 200 120000 -1 1234 5678 9
Udp: InDatagrams NoPorts
Udp: 1 2
`
	for _, tc := range []struct {
		name, in string
		want     uint64
		err      string
	}{
		{"linux", snmp, 5678, ""},
		{"no tcp", "Ip: a\nIp: 1\n", 0, "no Tcp"},
		{"no field", "Tcp: A B\nTcp: 1 2\n", 0, "no PassiveOpens"},
		{"short", "Tcp: A PassiveOpens\nTcp: 1\n", 0, "shorter"},
		{"garbled", "Tcp: PassiveOpens\nTcp: x\n", 0, "PassiveOpens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePassiveOpens(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestTerminationMessageFits(t *testing.T) {
	tr := NewTracker(strings.Repeat("p", 60), t0, 10*time.Millisecond, []uint16{8080}, 0, 1024)
	observe(tr, ms(0), 0, listen("8080"))
	var socks []Socket
	socks = append(socks, listen("8080"))
	for i := range 200 {
		a := netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(1 + i%250)})
		socks = append(socks, est(netip.AddrPortFrom(a, 4000).String(), uint64(100+i), 1, time.Duration(i)*time.Millisecond))
	}
	observe(tr, ms(300), 200, socks...)
	tl := tr.Timeline(ms(300))
	b, err := TerminationMessage(tl)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseTimeline(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 4096 || got.PeersOmitted == 0 || len(got.Peers)+got.PeersOmitted != 200 || got.Accepts != 200 {
		t.Errorf("%d bytes, %d peers, %d omitted", len(b), len(got.Peers), got.PeersOmitted)
	}
	// The latest peers stay.
	if got.Peers[0].Addr != tl.Peers[0].Addr {
		t.Errorf("first peer %s, want %s", got.Peers[0].Addr, tl.Peers[0].Addr)
	}
}

// A connection no dump saw (it opened and went between two polls with no
// TIME_WAIT on the pod's side) is stamped at the poll that counted it, once
// the next poll confirms the count; a growth the next poll takes back (a
// connection accepted between a dump and the counter's read, seen by the
// next dump) is never stamped.
func TestTrackerLastUnseen(t *testing.T) {
	tr := newTestTracker()
	observe(tr, ms(0), 100, listen("8080"))
	// A connection came and went before the dump at 10 ms.
	observe(tr, ms(10), 101, listen("8080"))
	if tl := tr.Timeline(ms(10)); tl.LastUnseen != nil {
		t.Errorf("last_unseen %v before the next poll confirmed it", tl.LastUnseen)
	}
	observe(tr, ms(20), 101, listen("8080"))
	tl := tr.Timeline(ms(20))
	at(t, "last_unseen", tl.LastUnseen, ms(10))
	if *tl.UnseenConnections != 1 {
		t.Errorf("unseen %d, want 1", *tl.UnseenConnections)
	}

	// At 30 ms the counter includes a connection accepted after the dump;
	// the dump at 40 ms lists it: not an unseen one.
	observe(tr, ms(30), 102, listen("8080"))
	observe(tr, ms(40), 102, listen("8080"), tw("10.1.0.9:6000", 9))
	tl = tr.Timeline(ms(40))
	at(t, "last_unseen after a transient", tl.LastUnseen, ms(10))
	if *tl.UnseenConnections != 1 || tl.Accepts != 1 {
		t.Errorf("unseen %d accepts %d, want 1 and 1", *tl.UnseenConnections, tl.Accepts)
	}

	// Two more unseen by 50 ms, confirmed at 60 ms.
	observe(tr, ms(50), 104, listen("8080"), tw("10.1.0.9:6000", 9))
	observe(tr, ms(60), 104, listen("8080"), tw("10.1.0.9:6000", 9))
	at(t, "last_unseen", tr.Timeline(ms(60)).LastUnseen, ms(50))
}
