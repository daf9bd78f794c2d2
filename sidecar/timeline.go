package sidecar

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// TimelineVersion is the version of the Timeline JSON layout.
const TimelineVersion = 1

// Timeline is the sidecar's record, served at GET /timeline and written as
// the termination message. Its names follow the probe's Timeline
// (probe/timeline.go) where they mean the same: last_accept, last_request,
// peers; listener_closed is the sidecar's own. Instants are the sidecar's
// wall clock, RFC 3339 with ns; the tool corrects them for skew (GET /clock).
//
// Precision: a poll stamps its dump when the dump returns, so an instant
// stamped from a poll is late by at most the poll interval (the connection
// or close happened since the previous poll) plus the dump's duration
// (Poll.MaxReadNS). last_request is computed from tcp_info's
// tcpi_last_data_recv, counted in jiffies: within one jiffy (1-10 ms, by
// the kernel's HZ) before, or the dump's duration after, the data arrived.
type Timeline struct {
	Version int    `json:"version"`
	Pod     string `json:"pod"`
	// Now is when this timeline was rendered; LastPoll the last dump it
	// includes.
	Now      time.Time  `json:"now"`
	LastPoll *time.Time `json:"last_poll,omitempty"`
	// Started is when the sidecar began.
	Started time.Time `json:"started"`
	// Ports are the app's ports it watches (--port).
	Ports []uint16 `json:"ports"`

	// ListenerOpen is the first poll that found a LISTEN socket on every
	// one of Ports. ListenerClosed is the first poll after that which found
	// one of them gone: the app stopped accepting there (connections are
	// refused from then on); absent while all listen. Listeners has each
	// port's own instants.
	ListenerOpen   *time.Time `json:"listener_open,omitempty"`
	ListenerClosed *time.Time `json:"listener_closed,omitempty"`
	Listeners      []Listener `json:"listeners,omitempty"`
	// Sigterm is when the sidecar was told to stop: for a native sidecar,
	// after every app container has exited.
	Sigterm *time.Time `json:"sigterm,omitempty"`

	// Accepts counts connections seen on Ports: a local port among them, a
	// 4-tuple and socket cookie not in the previous dump, in any state but
	// LISTEN and SYN_RECV (TIME_WAIT included). LastAccept is the poll that
	// first saw the latest of them; FirstAccept the earliest.
	Accepts     int64      `json:"accepts"`
	FirstAccept *time.Time `json:"first_accept,omitempty"`
	LastAccept  *time.Time `json:"last_accept,omitempty"`
	// LastRequest is the latest data received on Ports: the dump's instant
	// less tcpi_last_data_recv, taken when a connection's
	// tcpi_bytes_received grew (so an idle connection does not move it).
	LastRequest *time.Time `json:"last_request,omitempty"`

	// OtherAccepts counts connections seen on the namespace's other
	// listening ports (a sidecar of the app on another port, a metrics
	// port), and OwnAccepts the sidecar's own server's (counted at accept).
	OtherAccepts int64 `json:"other_accepts"`
	OwnAccepts   int64 `json:"own_accepts"`
	// PassiveOpens is /proc/net/snmp Tcp: PassiveOpens since the first poll:
	// every connection the namespace accepted. UnseenConnections is
	// PassiveOpens less Accepts, OtherAccepts and OwnAccepts: connections
	// that opened and went away between two polls without a TIME_WAIT entry
	// on this side (the client closed first, or a reset). They cannot be
	// given a port or a peer; the kubelet's probes of the app count among
	// them when they are that short (when seen, they are Accepts from the
	// node's address). Exact once no connection has been accepted for one
	// poll; while connections arrive it may count those accepted in the µs
	// between a dump's end and the counter's read, which the next poll sees.
	// PassiveOpensError is set when the counter could not be read (the
	// unseen count is then absent).
	PassiveOpens      int64  `json:"passive_opens"`
	UnseenConnections *int64 `json:"unseen_connections,omitempty"`
	// LastUnseen is the latest poll at which UnseenConnections grew and the
	// next poll confirmed it: a connection it could not see opened and went
	// away in the gap before that poll (no peer, no port). The window must
	// reach it: with a proxy that closes its connections first, the last
	// request's connection may be one of them. A growth the next poll takes
	// back was a connection accepted between a dump and the counter's read
	// (the app's, seen by the next dump, or the sidecar's own server's,
	// counted at its accept): never stamped. A growth at the very last
	// poll has no next one and is not stamped either.
	LastUnseen        *time.Time `json:"last_unseen,omitempty"`
	PassiveOpensError string     `json:"passive_opens_error,omitempty"`

	// Peers is per peer IP address (not port), capped by --max-peers, ordered
	// by latest activity first; PeersOverflow counts accepts from peers beyond
	// the cap; PeersOmitted counts peers left out of this rendering (the
	// termination message's 4 KiB).
	Peers         []Peer `json:"peers,omitempty"`
	PeersOverflow int64  `json:"peers_overflow,omitempty"`
	PeersOmitted  int    `json:"peers_omitted,omitempty"`

	Poll Poll `json:"poll"`
}

// Listener is one watched port's LISTEN socket as the polls saw it.
type Listener struct {
	Port uint16 `json:"port"`
	// Open is the first poll that found it listening; Closed the first poll
	// that found it gone after that (cleared if it listens again); LastSeen
	// the last poll that found it: the close happened in (LastSeen, Closed].
	Open     *time.Time `json:"open,omitempty"`
	Closed   *time.Time `json:"closed,omitempty"`
	LastSeen *time.Time `json:"last_seen,omitempty"`
}

// Peer is what one peer IP address did on the app's ports.
type Peer struct {
	Addr        string     `json:"addr"`
	Accepts     int64      `json:"accepts"`
	LastAccept  *time.Time `json:"last_accept,omitempty"`
	LastRequest *time.Time `json:"last_request,omitempty"`
}

// Poll is how the polls went: how many, how long a dump took, how late
// they came, what failed. Durations are ns.
type Poll struct {
	IntervalNS int64 `json:"interval_ns"`
	Polls      int64 `json:"polls"`
	// Sockets is how many sockets the last dump listed (the namespace's,
	// every port).
	Sockets int `json:"sockets"`
	// MaxReadNS and MeanReadNS are a dump's duration; MaxGapNS the longest
	// time between two dumps' ends: the real resolution of an accept or
	// close stamp, longer than the interval when --max-cpu spaced the polls
	// out (a dump costs about 1 µs a socket of the namespace).
	MaxReadNS  int64 `json:"max_read_ns"`
	MeanReadNS int64 `json:"mean_read_ns"`
	MaxGapNS   int64 `json:"max_gap_ns"`
	// Interrupted counts dumps the kernel flagged as possibly inconsistent;
	// their sockets are used, and the previous dump's that they lack are kept.
	Interrupted int64 `json:"interrupted,omitempty"`
	// Errors counts failed dumps; LastError is the latest.
	Errors    int64  `json:"errors,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// ParseTimeline decodes a sidecar Timeline and checks its version.
func ParseTimeline(b []byte) (Timeline, error) {
	var tl Timeline
	if err := json.Unmarshal(b, &tl); err != nil {
		return tl, fmt.Errorf("decode sidecar timeline: %w", err)
	}
	if tl.Version != TimelineVersion {
		return tl, fmt.Errorf("sidecar timeline version %d, this epwindow reads %d", tl.Version, TimelineVersion)
	}
	return tl, nil
}

// Dump is one poll's input to the Tracker.
type Dump struct {
	// Start and End bracket the socket dump (sidecar clock).
	Start, End  time.Time
	Sockets     []Socket
	Interrupted bool
	// Err is a failed dump: nothing else in it counts.
	Err error
	// PassiveOpens is /proc/net/snmp's counter read after the dump;
	// PassiveOpensErr its failure.
	PassiveOpens    uint64
	PassiveOpensErr error
	// OwnAccepts is the sidecar server's accepts so far.
	OwnAccepts int64
}

// connKey is one connection: its 4-tuple and socket cookie.
type connKey struct {
	local, remote netip.AddrPort
	cookie        uint64
}

type peerRec struct {
	accepts                 int64
	lastAccept, lastRequest time.Time
}

type listenerRec struct {
	open                 bool
	opened, closed, seen time.Time
}

// Tracker turns dumps into the Timeline. It is the sidecar's pure core: no
// clock, no kernel, no lock (Sidecar holds one around it).
type Tracker struct {
	pod      string
	started  time.Time
	interval time.Duration
	ports    []uint16
	own      uint16
	maxPeers int

	// prev holds the connections of the last dump with their
	// tcpi_bytes_received; cur is built from the next one and swapped.
	prev, cur map[connKey]uint64
	// listening is every port a LISTEN socket had in the last dump.
	listening, listeningNext map[uint16]bool
	baselined                bool

	listeners   map[uint16]*listenerRec
	allOpen     time.Time
	firstClosed time.Time
	sigterm     time.Time

	peers         map[netip.Addr]*peerRec
	peersOverflow int64

	accepts, otherAccepts, ownAccepts    int64
	firstAccept, lastAccept, lastRequest time.Time

	poStart, poLast uint64
	poSet           bool
	// unseen is the confirmed level of UnseenConnections; a growth above
	// it waits in pendingAt/pending for the next poll; lastUnseen is the
	// latest confirmed growth's poll.
	unseen     int64
	pendingAt  time.Time
	pending    int64
	lastUnseen time.Time
	ownStart   int64
	poErr      string

	polls, errors, interrupted int64
	sockets                    int
	lastPoll                   time.Time
	maxRead, totalRead, maxGap time.Duration
	lastRead                   time.Duration
	lastErr                    string
}

// NewTracker starts a timeline for the app's ports; own is the sidecar's
// own server port (its connections are counted by the server, not here),
// 0 if none.
func NewTracker(pod string, started time.Time, interval time.Duration, ports []uint16, own uint16, maxPeers int) *Tracker {
	t := &Tracker{
		pod: pod, started: started, interval: interval, own: own, maxPeers: maxPeers,
		ports:         slices.Sorted(slices.Values(ports)),
		prev:          map[connKey]uint64{},
		cur:           map[connKey]uint64{},
		listening:     map[uint16]bool{},
		listeningNext: map[uint16]bool{},
		listeners:     map[uint16]*listenerRec{},
		peers:         map[netip.Addr]*peerRec{},
	}
	for _, p := range t.ports {
		t.listeners[p] = &listenerRec{}
	}
	return t
}

func (t *Tracker) isApp(port uint16) bool {
	_, ok := t.listeners[port]
	return ok
}

// Observe takes one poll's dump. The first successful dump is the baseline:
// connections open then were accepted before the sidecar began (as a native
// sidecar it starts before the app, so there are none), so they are known
// but not counted, and PassiveOpens counts from it.
func (t *Tracker) Observe(d Dump) {
	t.polls++
	if d.Err != nil {
		t.errors++
		t.lastErr = d.Err.Error()
		return
	}
	at := d.End
	if !t.lastPoll.IsZero() {
		t.maxGap = max(t.maxGap, at.Sub(t.lastPoll))
	}
	read := d.End.Sub(d.Start)
	t.maxRead = max(t.maxRead, read)
	t.totalRead += read
	t.lastRead = read
	t.lastPoll = at
	t.sockets = len(d.Sockets)
	if d.Interrupted {
		t.interrupted++
	}

	clear(t.listeningNext)
	for i := range d.Sockets {
		if s := &d.Sockets[i]; s.State == StateListen {
			t.listeningNext[s.Local.Port()] = true
		}
	}
	for i := range d.Sockets {
		s := &d.Sockets[i]
		switch s.State {
		case StateListen, StateSynRecv, StateNewSynRecv, StateSynSent:
			continue // not an accepted connection (SYN_SENT: our own dial out)
		}
		port := s.Local.Port()
		app := t.isApp(port)
		// Another port the namespace listens on, now or at the last dump (its
		// listener may have closed since): connections there are accepted
		// ones. A dial out has an ephemeral local port that no listener holds.
		other := !app && port != t.own && (t.listeningNext[port] || t.listening[port])
		if !app && !other {
			continue
		}
		k := connKey{s.Local, s.Remote, s.Cookie}
		bytes, known := t.prev[k]
		if !known && t.baselined {
			if app {
				t.accept(s.Remote.Addr(), at)
			} else {
				t.otherAccepts++
			}
		}
		if s.Info {
			if app && s.BytesReceived > bytes && t.baselined {
				t.request(s.Remote.Addr(), at.Add(-s.LastDataRecv))
			}
			bytes = max(bytes, s.BytesReceived)
		}
		t.cur[k] = bytes
	}
	if d.Interrupted {
		// A connection missing from a possibly inconsistent dump may still be
		// there: keep it, so that the next dump does not count it again.
		for k, b := range t.prev {
			if _, ok := t.cur[k]; !ok {
				t.cur[k] = b
			}
		}
	}
	t.prev, t.cur = t.cur, t.prev
	clear(t.cur)
	t.listening, t.listeningNext = t.listeningNext, t.listening

	t.listenersAt(at)

	switch {
	case d.PassiveOpensErr != nil:
		t.poErr = d.PassiveOpensErr.Error()
	case !t.poSet:
		t.poStart, t.poLast, t.poSet = d.PassiveOpens, d.PassiveOpens, true
		t.poErr = ""
	default:
		t.poLast = d.PassiveOpens
		t.poErr = ""
	}
	if !t.baselined {
		t.ownStart = d.OwnAccepts
	}
	t.ownAccepts = d.OwnAccepts - t.ownStart
	if t.poSet && d.PassiveOpensErr == nil {
		t.observeUnseen(at, t.unseenNow())
	}
	t.baselined = true
}

// observeUnseen confirms a growth of the unseen count one poll later: it
// is real when this poll's count is still above the level before it.
func (t *Tracker) observeUnseen(at time.Time, u int64) {
	if !t.pendingAt.IsZero() {
		if kept := min(t.pending, u); kept > t.unseen {
			t.lastUnseen, t.unseen = t.pendingAt, kept
		}
		t.pendingAt = time.Time{}
	}
	switch {
	case u > t.unseen:
		t.pendingAt, t.pending = at, u
	case u < t.unseen:
		t.unseen = u
	}
}

// unseenNow is PassiveOpens since the baseline less every connection seen.
func (t *Tracker) unseenNow() int64 {
	return int64(t.poLast-t.poStart) - t.accepts - t.otherAccepts - t.ownAccepts
}

// accept records a connection first seen at at from peer.
func (t *Tracker) accept(peer netip.Addr, at time.Time) {
	t.accepts++
	if t.firstAccept.IsZero() {
		t.firstAccept = at
	}
	t.lastAccept = later(t.lastAccept, at)
	if p := t.peer(peer); p != nil {
		p.accepts++
		p.lastAccept = later(p.lastAccept, at)
	}
}

// request records data received from peer at at.
func (t *Tracker) request(peer netip.Addr, at time.Time) {
	t.lastRequest = later(t.lastRequest, at)
	if p := t.peer(peer); p != nil {
		p.lastRequest = later(p.lastRequest, at)
	}
}

// peer returns peer's record, nil (and the overflow counted) past the cap.
func (t *Tracker) peer(a netip.Addr) *peerRec {
	if p, ok := t.peers[a]; ok {
		return p
	}
	if len(t.peers) >= t.maxPeers {
		t.peersOverflow++
		return nil
	}
	p := &peerRec{}
	t.peers[a] = p
	return p
}

func (t *Tracker) listenersAt(at time.Time) {
	all := true
	for _, p := range t.ports {
		l := t.listeners[p]
		switch now := t.listening[p]; {
		case now && !l.open:
			l.open = true
			if l.opened.IsZero() {
				l.opened = at
			}
			l.closed = time.Time{}
		case !now && l.open:
			l.open = false
			l.closed = at
			if t.firstClosed.IsZero() && !t.allOpen.IsZero() {
				t.firstClosed = at
			}
		}
		if l.open {
			l.seen = at
		}
		all = all && l.open
	}
	if all && t.allOpen.IsZero() {
		t.allOpen = at
	}
}

// Sigterm stamps the stop request (first one wins).
func (t *Tracker) Sigterm(at time.Time) {
	if t.sigterm.IsZero() {
		t.sigterm = at
	}
}

// Timeline renders the record as of now.
func (t *Tracker) Timeline(now time.Time) Timeline {
	tl := Timeline{
		Version: TimelineVersion, Pod: t.pod, Now: now, Started: t.started,
		Ports:          slices.Clone(t.ports),
		LastPoll:       ptr(t.lastPoll),
		ListenerOpen:   ptr(t.allOpen),
		ListenerClosed: ptr(t.firstClosed),
		Sigterm:        ptr(t.sigterm),
		Accepts:        t.accepts,
		FirstAccept:    ptr(t.firstAccept),
		LastAccept:     ptr(t.lastAccept),
		LastRequest:    ptr(t.lastRequest),
		OtherAccepts:   t.otherAccepts,
		OwnAccepts:     t.ownAccepts,
		PeersOverflow:  t.peersOverflow,
		Poll: Poll{
			IntervalNS: int64(t.interval), Polls: t.polls, Sockets: t.sockets,
			MaxReadNS: int64(t.maxRead), MaxGapNS: int64(t.maxGap),
			Interrupted: t.interrupted, Errors: t.errors, LastError: t.lastErr,
		},
	}
	if ok := t.polls - t.errors; ok > 0 {
		tl.Poll.MeanReadNS = int64(t.totalRead) / ok
	}
	for _, p := range t.ports {
		l := t.listeners[p]
		tl.Listeners = append(tl.Listeners, Listener{Port: p, Open: ptr(l.opened), Closed: ptr(l.closed), LastSeen: ptr(l.seen)})
	}
	if t.poSet {
		tl.PassiveOpens = int64(t.poLast - t.poStart)
		unseen := t.unseenNow()
		tl.UnseenConnections = &unseen
		tl.LastUnseen = ptr(t.lastUnseen)
	}
	tl.PassiveOpensError = t.poErr
	for a, p := range t.peers {
		tl.Peers = append(tl.Peers, Peer{Addr: a.String(), Accepts: p.accepts, LastAccept: ptr(p.lastAccept), LastRequest: ptr(p.lastRequest)})
	}
	slices.SortFunc(tl.Peers, func(a, b Peer) int {
		if c := latest(b).Compare(latest(a)); c != 0 {
			return c
		}
		return compareStrings(a.Addr, b.Addr)
	})
	return tl
}

// latest is a peer's latest activity.
func latest(p Peer) time.Time {
	var t time.Time
	if p.LastAccept != nil {
		t = *p.LastAccept
	}
	if p.LastRequest != nil {
		t = later(t, *p.LastRequest)
	}
	return t
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func ptr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
