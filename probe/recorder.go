package probe

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Recorder is the probe's accounting: counters and first/last instants of
// accepts and requests, in total, for traffic only, after SIGTERM, and per
// peer IP address. Its memory is bounded: a fixed set of counters plus at
// most maxPeers peer records; nothing is kept per request, and per-connection
// state lives in the Conn handle the caller holds for the connection's
// lifetime (it is garbage once the connection is gone, so nothing is left to
// remove on close).
//
// Every instant is taken from the clock plus the configured offset, before
// the Recorder's lock is taken (stamp at the door). It is safe for
// concurrent use.
type Recorder struct {
	clk      clock.PassiveClock
	offset   time.Duration
	pod      string
	maxPeers int

	mu sync.Mutex
	// Zero instants mean "not yet".
	started, listenerOpen, prestop, sigterm, released, holdExpired, exit time.Time
	prestopCalls                                                         int64

	accepts, requests, trafficAccepts, trafficRequests int64
	firstAccept, lastAccept, lastRequest               time.Time
	firstTrafficRequest                                time.Time
	lastTrafficAccept, lastTrafficRequest              time.Time

	acceptsAfter, requestsAfter, trafficAcceptsAfter, trafficRequestsAfter int64

	peers         map[netip.Addr]*peerStats
	peersOverflow int64
}

type peerStats struct {
	addr                                  netip.Addr
	accepts, requests, trafficRequests    int64
	lastAccept, lastRequest               time.Time
	lastTrafficAccept, lastTrafficRequest time.Time
}

// Conn is the accounting handle of one accepted connection. The server keeps
// it in the connection's context; it is not safe to use from two Recorders.
type Conn struct {
	accepted time.Time
	peer     *peerStats // nil when the peer is beyond the cap
	traffic  bool       // carried at least one traffic request
}

// Accepted is the connection's accept instant (probe clock plus offset).
func (c *Conn) Accepted() time.Time { return c.accepted }

// NewRecorder returns a Recorder that reads clk, adds offset to every instant
// (fault injection: --clock-offset), names pod, and keeps at most maxPeers
// peer records (0: none; accepts from further peers are counted as overflow).
// It stamps Started.
func NewRecorder(clk clock.PassiveClock, pod string, offset time.Duration, maxPeers int) *Recorder {
	r := &Recorder{
		clk:      clk,
		offset:   offset,
		pod:      pod,
		maxPeers: max(maxPeers, 0),
		peers:    make(map[netip.Addr]*peerStats),
	}
	r.started = r.Now()
	return r
}

// Now is the probe's clock plus the offset: the time every instant it
// reports is on.
func (r *Recorder) Now() time.Time { return r.clk.Now().Add(r.offset) }

// afterSigterm reports whether an instant counts as after SIGTERM; r.mu held.
// An instant stamped before SIGTERM was but recorded after it does not count.
func (r *Recorder) afterSigterm(at time.Time) bool {
	return !r.sigterm.IsZero() && !at.Before(r.sigterm)
}

// Accept records a new connection from peer and returns its handle.
// LastAccept: the server's ConnContext, called right after Accept returns;
// probe clock, ~µs.
func (r *Recorder) Accept(peer netip.Addr) *Conn {
	at := r.Now()
	peer = peer.Unmap()
	c := &Conn{accepted: at}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.accepts++
	if r.firstAccept.IsZero() {
		r.firstAccept = at
	}
	r.lastAccept = laterOf(r.lastAccept, at)
	if r.afterSigterm(at) {
		r.acceptsAfter++
	}
	p := r.peers[peer]
	if p == nil && len(r.peers) < r.maxPeers {
		p = &peerStats{addr: peer}
		r.peers[peer] = p
	}
	if p == nil {
		r.peersOverflow++
		return c
	}
	p.accepts++
	p.lastAccept = laterOf(p.lastAccept, at)
	c.peer = p
	return c
}

// Request records one HTTP request on c (keep-alive requests included);
// traffic is false for the control endpoints. The first traffic request on a
// connection makes it a traffic accept, dated by its accept instant.
// LastRequest: handler entry, probe clock, ~µs after the request line is read.
func (r *Recorder) Request(c *Conn, traffic bool) time.Time {
	at := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	after := r.afterSigterm(at)
	r.requests++
	r.lastRequest = laterOf(r.lastRequest, at)
	if after {
		r.requestsAfter++
	}
	p := c.peer
	if p != nil {
		p.requests++
		p.lastRequest = laterOf(p.lastRequest, at)
	}
	if !traffic {
		return at
	}
	r.trafficRequests++
	r.firstTrafficRequest = earlierOf(r.firstTrafficRequest, at)
	r.lastTrafficRequest = laterOf(r.lastTrafficRequest, at)
	if after {
		r.trafficRequestsAfter++
	}
	if p != nil {
		p.trafficRequests++
		p.lastTrafficRequest = laterOf(p.lastTrafficRequest, at)
	}
	if !c.traffic {
		c.traffic = true
		r.trafficAccepts++
		r.lastTrafficAccept = laterOf(r.lastTrafficAccept, c.accepted)
		if r.afterSigterm(c.accepted) {
			r.trafficAcceptsAfter++
		}
		if p != nil {
			p.lastTrafficAccept = laterOf(p.lastTrafficAccept, c.accepted)
		}
	}
	return at
}

// ListenerOpen records that the traffic listener is open (after any
// --listen-delay). ListenerOpen: right after listen(2) returned, probe
// clock, ~µs; from here on connections are accepted, not refused.
func (r *Recorder) ListenerOpen() time.Time { return r.stampFirst(&r.listenerOpen) }

// Prestop records a preStop call and reports whether it was the first (the
// one that stamps PrestopCalled). PrestopCalled: handler entry of the
// kubelet's preStop httpGet, probe clock, ~µs.
func (r *Recorder) Prestop() (at time.Time, first bool) {
	at = r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prestopCalls++
	return at, stampOnce(&r.prestop, at)
}

// Sigterm records SIGTERM and reports whether it was the first.
// Sigterm: when the server loop sees the signal, probe clock, ~µs after
// delivery.
func (r *Recorder) Sigterm() (at time.Time, first bool) {
	at = r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return at, stampOnce(&r.sigterm, at)
}

// Release records POST /release and reports whether it was the first.
func (r *Recorder) Release() (at time.Time, first bool) {
	at = r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return at, stampOnce(&r.released, at)
}

// HoldExpired records that --hold ran out before any release.
func (r *Recorder) HoldExpired() time.Time { return r.stampFirst(&r.holdExpired) }

// Exit records the end of serving: after drain, before the termination
// message is written.
func (r *Recorder) Exit() time.Time { return r.stampFirst(&r.exit) }

// stampFirst stamps now into *dst (one of r's instants) unless it is set
// already, and returns now either way. The clock is read before the lock.
func (r *Recorder) stampFirst(dst *time.Time) time.Time {
	at := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	stampOnce(dst, at)
	return at
}

// Timeline renders what has been recorded so far, with Now stamped and
// peers ordered by latest activity first.
func (r *Recorder) Timeline() Timeline {
	now := r.Now()
	r.mu.Lock()
	tl := Timeline{
		Version:       TimelineVersion,
		Pod:           r.pod,
		Now:           now.Round(0),
		ClockOffsetNS: int64(r.offset),
		Started:       r.started.Round(0),
		ListenerOpen:  instant(r.listenerOpen),

		PrestopCalled: instant(r.prestop),
		PrestopCalls:  r.prestopCalls,
		Sigterm:       instant(r.sigterm),
		Released:      instant(r.released),
		HoldExpired:   instant(r.holdExpired),
		Exit:          instant(r.exit),

		Accepts:             r.accepts,
		Requests:            r.requests,
		FirstAccept:         instant(r.firstAccept),
		LastAccept:          instant(r.lastAccept),
		LastRequest:         instant(r.lastRequest),
		TrafficAccepts:      r.trafficAccepts,
		TrafficRequests:     r.trafficRequests,
		FirstTrafficRequest: instant(r.firstTrafficRequest),
		LastTrafficAccept:   instant(r.lastTrafficAccept),
		LastTrafficRequest:  instant(r.lastTrafficRequest),

		AcceptsAfterSigterm:         r.acceptsAfter,
		RequestsAfterSigterm:        r.requestsAfter,
		TrafficAcceptsAfterSigterm:  r.trafficAcceptsAfter,
		TrafficRequestsAfterSigterm: r.trafficRequestsAfter,

		PeersOverflow: r.peersOverflow,
	}
	peers := make([]peerStats, 0, len(r.peers))
	for _, p := range r.peers {
		peers = append(peers, *p)
	}
	r.mu.Unlock()

	slices.SortFunc(peers, func(a, b peerStats) int {
		if c := b.lastTrafficRequest.Compare(a.lastTrafficRequest); c != 0 {
			return c
		}
		if c := b.lastRequest.Compare(a.lastRequest); c != 0 {
			return c
		}
		if c := b.lastAccept.Compare(a.lastAccept); c != 0 {
			return c
		}
		return cmp.Compare(a.addr.String(), b.addr.String())
	})
	if len(peers) > 0 {
		tl.Peers = make([]Peer, len(peers))
	}
	for i, p := range peers {
		tl.Peers[i] = Peer{
			Addr:               p.addr.String(),
			Accepts:            p.accepts,
			Requests:           p.requests,
			TrafficRequests:    p.trafficRequests,
			LastAccept:         instant(p.lastAccept),
			LastRequest:        instant(p.lastRequest),
			LastTrafficAccept:  instant(p.lastTrafficAccept),
			LastTrafficRequest: instant(p.lastTrafficRequest),
		}
	}
	return tl
}

// laterOf keeps the later instant: concurrent stamps may be recorded out of
// order, and a "last" must never move backwards.
func laterOf(cur, at time.Time) time.Time {
	if at.After(cur) {
		return at
	}
	return cur
}

// earlierOf keeps the earlier instant (zero: none yet): concurrent stamps
// may be recorded out of order, and a "first" must never move forwards.
func earlierOf(cur, at time.Time) time.Time {
	if cur.IsZero() || at.Before(cur) {
		return at
	}
	return cur
}

// stampOnce sets *dst to at unless it is already set; first call wins.
func stampOnce(dst *time.Time, at time.Time) bool {
	if !dst.IsZero() {
		return false
	}
	*dst = at
	return true
}

// instant renders a recorded instant; the monotonic reading is dropped so
// that what is served equals what is decoded.
func instant(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.Round(0)
	return &t
}
