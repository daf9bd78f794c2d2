package probe

import "time"

// TimelineVersion is the version of the Timeline JSON layout.
const TimelineVersion = 1

// Timeline is the probe's record of what reached it, served at GET /timeline
// and written as the termination message. Instants are the probe's wall clock
// (plus --clock-offset), RFC 3339 with ns; the tool corrects them for skew.
// Each is stamped before any lock is taken, so its precision is the
// scheduling delay of the goroutine that stamps it (~µs on an idle node) plus
// the skew bound the tool derives. Where an event happens several times, the
// Last* instants keep the latest stamp, never moving backwards.
type Timeline struct {
	Version int    `json:"version"`
	Pod     string `json:"pod"`
	// Now is when this timeline was rendered.
	Now time.Time `json:"now"`
	// ClockOffsetNS is the injected --clock-offset (fault injection), already
	// included in every instant here.
	ClockOffsetNS int64 `json:"clock_offset_ns,omitempty"`
	// Started is when the probe process began (before any --listen-delay):
	// the container's start as the app sees it.
	Started time.Time `json:"started"`
	// ListenerOpen is when its traffic listener opened: Started plus
	// --listen-delay. Before it, connections to the port (the kubelet's
	// readiness probe included) are refused. Absent from probes older than
	// this field, whose listener opened at Started.
	ListenerOpen *time.Time `json:"listener_open,omitempty"`

	// PrestopCalled is the first GET /prestop (the kubelet's preStop httpGet),
	// stamped at handler entry before any ?sleep; PrestopCalls counts every
	// call, the first included.
	PrestopCalled *time.Time `json:"prestop_called,omitempty"`
	PrestopCalls  int64      `json:"prestop_calls,omitempty"`
	// Sigterm is when the probe's serve loop saw SIGTERM (or SIGINT): µs
	// after delivery.
	Sigterm *time.Time `json:"sigterm,omitempty"`
	// Released is the first POST /release; HoldExpired is set instead when
	// --hold ran out first.
	Released    *time.Time `json:"released,omitempty"`
	HoldExpired *time.Time `json:"hold_expired,omitempty"`
	// Exit is stamped after the server has drained, just before the
	// termination message is written.
	Exit *time.Time `json:"exit,omitempty"`

	// Accepts and Requests count everything; the Traffic* fields count only
	// connections/requests that carried traffic (not /healthz, /timeline,
	// /clock, /prestop, /release), which is what the window is made of.
	//
	// An accept is stamped by the HTTP server's ConnContext hook, on its accept
	// loop right after accept(2) returns; a request at handler entry, right
	// after its header has been read (keep-alive requests included).
	Accepts     int64      `json:"accepts"`
	Requests    int64      `json:"requests"`
	FirstAccept *time.Time `json:"first_accept,omitempty"`
	LastAccept  *time.Time `json:"last_accept,omitempty"`
	LastRequest *time.Time `json:"last_request,omitempty"`
	// TrafficAccepts counts connections that carried at least one traffic
	// request.
	TrafficAccepts  int64 `json:"traffic_accepts"`
	TrafficRequests int64 `json:"traffic_requests"`
	// FirstTrafficRequest is the earliest traffic request: when routing to
	// this pod began, as the pod saw it.
	FirstTrafficRequest *time.Time `json:"first_traffic_request,omitempty"`
	// LastTrafficAccept is the accept instant of the last connection that
	// carried a traffic request; LastTrafficRequest the last such request.
	LastTrafficAccept  *time.Time `json:"last_traffic_accept,omitempty"`
	LastTrafficRequest *time.Time `json:"last_traffic_request,omitempty"`

	// The *AfterSigterm counts are of events stamped at or after Sigterm; a
	// traffic accept counts when its connection was accepted after Sigterm,
	// whenever its first traffic request came.
	AcceptsAfterSigterm         int64 `json:"accepts_after_sigterm"`
	RequestsAfterSigterm        int64 `json:"requests_after_sigterm"`
	TrafficAcceptsAfterSigterm  int64 `json:"traffic_accepts_after_sigterm"`
	TrafficRequestsAfterSigterm int64 `json:"traffic_requests_after_sigterm"`

	// Peers is per peer IP address (not port), capped by --max-peers;
	// PeersOverflow counts accepts from peers beyond the cap. Peers are ordered by latest activity first (traffic request, then any
	// request, then accept). PeersOmitted counts peers left out of this
	// rendering to fit the 4 KiB termination message (the oldest go first).
	Peers         []Peer `json:"peers,omitempty"`
	PeersOverflow int64  `json:"peers_overflow,omitempty"`
	PeersOmitted  int    `json:"peers_omitted,omitempty"`

	// Streams is the WebSocket and gRPC stream record (streams.go); the
	// termination message carries its counts, not its records.
	Streams *StreamLog `json:"streams,omitempty"`
}

// Peer is what one peer IP address sent; its instants are stamped as the
// Timeline's are.
type Peer struct {
	Addr               string     `json:"addr"`
	Accepts            int64      `json:"accepts"`
	Requests           int64      `json:"requests"`
	TrafficRequests    int64      `json:"traffic_requests"`
	LastAccept         *time.Time `json:"last_accept,omitempty"`
	LastRequest        *time.Time `json:"last_request,omitempty"`
	LastTrafficAccept  *time.Time `json:"last_traffic_accept,omitempty"`
	LastTrafficRequest *time.Time `json:"last_traffic_request,omitempty"`
}
