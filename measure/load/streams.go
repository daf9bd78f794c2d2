package load

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/probe"
)

// Stream event kinds.
const (
	// EventOpen: a stream is established (WebSocket 101 read; gRPC response
	// header read), Pod is who serves it.
	EventOpen = "open"
	// EventClose: an open stream ended; How and Code say how.
	EventClose = "close"
	// EventFail: an attempt to (re-)open a stream failed; How is the kind
	// (status_502, refused, timeout, ...).
	EventFail = "fail"
)

// How a stream ended, seen from the client. Graceful ends carry the close
// code (WebSocket) or gRPC status code in Code.
const (
	// CloseWS: a WebSocket close frame arrived (Code: 1001, 1012, ...).
	CloseWS = "ws_close"
	// CloseGRPCStatus: a gRPC stream ended with a status the server sent
	// (trailers; Code 0 = OK).
	CloseGRPCStatus = "grpc_status"
	// CloseEOF: the connection ended without a close frame or trailers
	// (a WebSocket 1006 in browser terms; gRPC UNAVAILABLE).
	CloseEOF = KindEOF
	// CloseReset: the connection was reset (RST).
	CloseReset = KindReset
	// CloseTimeout: a read timed out.
	CloseTimeout = KindTimeout
	// CloseOther: any other error.
	CloseOther = KindOther
)

// Graceful reports whether a client-side close kind is graceful (a close
// frame or a server status), as opposed to abrupt.
func Graceful(how string) bool { return how == CloseWS || how == CloseGRPCStatus }

// StreamEvent is one open, close or failed attempt of one stream slot. At
// is stamped at the door: the kernel's receive time of the data that
// carried the event (a WebSocket's 101 or close frame; for gRPC, whose
// reader runs ahead, the last data read by then), or for an end without
// data (a FIN, a reset) the end door's wake-up (stampConn, endDoor).
type StreamEvent struct {
	Slot int `json:"slot"`
	// Stream is the id the attempt sent to the probe (probe.HeaderStream):
	// the probe's record of the stream carries it.
	Stream string    `json:"stream,omitempty"`
	Kind   string    `json:"kind"`
	At     time.Time `json:"at"`
	Pod    string    `json:"pod,omitempty"`
	How    string    `json:"how,omitempty"`
	// Code is the WebSocket close code or gRPC status code of a graceful
	// close; -1 when there is none.
	Code int `json:"code"`
	// Messages counts the messages the stream carried (close events).
	Messages int64 `json:"messages,omitempty"`
	// LastMessage is when its last message arrived (close events).
	LastMessage time.Time `json:"last_message,omitzero"`
	// ServerTime is the probe's clock as it accepted a WebSocket stream
	// (X-Epwindow-Time of the 101; open events): At − ServerTime is the
	// handshake's delay plus the clock skew.
	ServerTime time.Time `json:"server_time,omitzero"`
	// Detail is the error text of a close or failure, for humans.
	Detail string `json:"detail,omitempty"`
	// Began is when a failed attempt began (fail events; At is when it
	// failed): an attempt that timed out was refused by no one for its
	// whole span, and a 100 ms the herd was taken in "cleanly" must not
	// overlap it.
	Began time.Time `json:"began,omitzero"`
}

// Stream protocols (--stream-protocol).
const (
	ProtocolWebSocket = probe.ProtoWebSocket
	ProtocolGRPC      = probe.ProtoGRPC
)

// StreamConfig is what a StreamHolder holds open.
type StreamConfig struct {
	// URL is where the streams go (--url): http or https; a WebSocket goes
	// to its host at probe.PathStream, a gRPC stream to its host:port.
	URL string
	// Host, if set, is the Host header (WebSocket) or :authority (gRPC),
	// and the TLS server name of an https URL.
	Host string
	// TLS configures gRPC streams to an https URL (ALPN h2, server name
	// from Host or the URL); nil uses the system roots.
	TLS *tls.Config
	// Protocol is ProtocolWebSocket or ProtocolGRPC.
	Protocol string
	// Streams is how many streams to hold open (--streams).
	Streams int
	// Reconnect is the policy for re-opening an ended stream.
	Reconnect Reconnect
	// DialTimeout bounds one attempt to open a stream; DefaultTimeout if 0.
	DialTimeout time.Duration
	// MaxEvents caps the events kept (EventsDropped counts the rest);
	// DefaultMaxStreamEvents if zero.
	MaxEvents int
}

// DefaultMaxStreamEvents bounds a holder's event log (≈ 150 bytes each).
const DefaultMaxStreamEvents = 1 << 20

// Validate reports the first problem, naming the flag to change.
func (c StreamConfig) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: want http(s)://host[:port]/ for the streams", c.URL)
	}
	if c.Protocol != ProtocolWebSocket && c.Protocol != ProtocolGRPC {
		return fmt.Errorf("--stream-protocol %q: want websocket or grpc", c.Protocol)
	}
	if c.Streams <= 0 {
		return fmt.Errorf("--streams (%d) must be positive", c.Streams)
	}
	if c.DialTimeout < 0 || c.MaxEvents < 0 {
		return errors.New("stream dial timeout and event cap must not be negative")
	}
	return nil
}

// StreamHolder holds StreamConfig.Streams streams open, re-opens each as it
// ends by the Reconnect policy, and logs every open, close and failed
// attempt. Per-message state is two words per slot; the event log is capped.
type StreamHolder struct {
	cfg    StreamConfig
	clk    clock.PassiveClock
	target string // ws://host/stream or host:port
	// grpcTLS is the TLS of gRPC streams to an https URL, nil for h2c.
	grpcTLS *tls.Config
	// nonce tells this holder's stream ids from other holders' (the tool
	// and each runner hold streams to the same pods).
	nonce string

	open     atomic.Int64
	messages atomic.Int64

	mu      sync.Mutex
	events  []StreamEvent
	dropped int64
	// firstDropped is the earliest instant of a dropped event: the log is
	// incomplete from then on.
	firstDropped time.Time

	// dial opens every stream's connection (stampDialer), dialer a
	// WebSocket's over it (newWebSocketDialer); Run starts endDoor before
	// any stream opens.
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	dialer  *websocket.Dialer
	endDoor *endDoor
	// stamped, set by benchmarks only, is told each WebSocket open's and
	// close's stamp and connection.
	stamped func(open bool, at time.Time, sc *stampConn)
}

// NewStreamHolder checks cfg and builds a holder on clk.
func NewStreamHolder(cfg StreamConfig, clk clock.PassiveClock) (*StreamHolder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultTimeout
	}
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = DefaultMaxStreamEvents
	}
	if cfg.Reconnect.Policy == "" {
		cfg.Reconnect.Policy = ReconnectGRPCDefault
	}
	u, _ := url.Parse(cfg.URL)
	h := &StreamHolder{cfg: cfg, clk: clk, nonce: strconv.FormatUint(rand.Uint64()&0xffffff, 36)}
	h.dial = stampDialer(clk, func() *endDoor { return h.endDoor })
	h.dialer = newWebSocketDialer(h.dial)
	if cfg.Protocol == ProtocolWebSocket {
		scheme := "ws"
		if u.Scheme == "https" {
			scheme = "wss"
		}
		h.target = scheme + "://" + u.Host + probe.PathStream
	} else {
		h.target = u.Host
		if u.Port() == "" {
			h.target = net.JoinHostPort(u.Hostname(), defaultPort(u.Scheme))
		}
		if u.Scheme == "https" {
			h.grpcTLS = grpcTLSConfig(cfg, u)
		}
	}
	return h, nil
}

// defaultPort is the port of an http(s) URL that names none.
func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// grpcTLSConfig is the TLS a gRPC stream to the https URL u speaks: cfg.TLS
// (or the system roots) with the server name the Host override names, as
// the load generator's transport sets it (newTransport), else the URL's.
func grpcTLSConfig(cfg StreamConfig, u *url.URL) *tls.Config {
	c := &tls.Config{}
	if cfg.TLS != nil {
		c = cfg.TLS.Clone()
	}
	if c.ServerName == "" {
		c.ServerName = u.Hostname()
		if cfg.Host != "" {
			c.ServerName = cfg.Host
			if host, _, err := net.SplitHostPort(cfg.Host); err == nil {
				c.ServerName = host
			}
		}
	}
	return c
}

// OpenStreams is how many slots of a holder's event log (in log order, as
// Events and a runner's Stats give it) have a stream open at its end.
func OpenStreams(ev []StreamEvent) int {
	open := map[int]bool{}
	for _, e := range ev {
		switch e.Kind {
		case EventOpen:
			open[e.Slot] = true
		case EventClose:
			delete(open, e.Slot)
		}
	}
	return len(open)
}

// OpenByPod is how many streams of ev are open at its end, by the pod each
// opened on (an open event's Pod); streams whose pod is unknown are left
// out.
func OpenByPod(ev []StreamEvent) map[string]int {
	on := map[int]string{}
	for _, e := range ev {
		switch e.Kind {
		case EventOpen:
			on[e.Slot] = e.Pod
		case EventClose:
			delete(on, e.Slot)
		}
	}
	out := map[string]int{}
	for _, pod := range on {
		if pod != "" {
			out[pod]++
		}
	}
	return out
}

// Open is how many streams are open now.
func (h *StreamHolder) Open() int64 { return h.open.Load() }

// Messages is how many stream messages have arrived.
func (h *StreamHolder) Messages() int64 { return h.messages.Load() }

// Events is a copy of the event log and how many events did not fit it.
func (h *StreamHolder) Events() ([]StreamEvent, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]StreamEvent(nil), h.events...), h.dropped
}

// EventsSince is a copy of the event log from number since on (clamped to
// the log's length), the number of the event after it (the next call's
// since), and how many events did not fit the log, the first of them at
// firstDropped. The log only grows, so a reader that keeps the cursor
// reads each event once.
func (h *StreamHolder) EventsSince(since int) (events []StreamEvent, next int, dropped int64, firstDropped time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	since = min(max(since, 0), len(h.events))
	return append([]StreamEvent(nil), h.events[since:]...), len(h.events), h.dropped, h.firstDropped
}

// Dropped is how many events did not fit the log and the earliest instant
// of one (zero when none did).
func (h *StreamHolder) Dropped() (n int64, first time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dropped, h.firstDropped
}

// log appends *e to the event log.
func (h *StreamHolder) log(e *StreamEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) >= h.cfg.MaxEvents {
		// Events are stamped at the door, before the lock: the first
		// dropped is the earliest, not the first to arrive here.
		if h.dropped == 0 || e.At.Before(h.firstDropped) {
			h.firstDropped = e.At
		}
		h.dropped++
		return
	}
	h.events = append(h.events, *e)
}

// Run holds the streams until ctx ends, then closes them (a WebSocket
// with a close frame, 1001 going away; a gRPC stream by cancelling it)
// and returns nil.
func (h *StreamHolder) Run(ctx context.Context) error {
	if _, real := h.clk.(clock.RealClock); real {
		// Without it the stamps fall back to the reads' returns.
		if on, err := rxStampsOn(); err == nil {
			defer on.Close()
		}
		// Without it an end without data is stamped by the read that
		// saw it.
		if d, err := newEndDoor(h.clk); err == nil {
			h.endDoor = d
			defer d.Close()
		}
	}
	var wg sync.WaitGroup
	for slot := range h.cfg.Streams {
		wg.Go(func() { h.slot(ctx, slot) })
	}
	wg.Wait()
	return nil
}

// slot keeps one stream open: open, read until it ends, wait by the
// policy, again.
func (h *StreamHolder) slot(ctx context.Context, slot int) {
	failures := 0
	for attempt := 0; ctx.Err() == nil; attempt++ {
		ok := h.once(ctx, slot, h.streamID(slot, attempt))
		if ctx.Err() != nil {
			return
		}
		if ok {
			failures = 0
		}
		wait := h.cfg.Reconnect.Wait(failures, uniform())
		if !ok {
			failures++
		}
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// streamID names one attempt of one slot: NONCE-SLOT-ATTEMPT, short
// enough that dozens fit the probe's 4 KiB termination message.
func (h *StreamHolder) streamID(slot, attempt int) string {
	return h.nonce + "-" + strconv.Itoa(slot) + "-" + strconv.Itoa(attempt)
}

// once opens one stream and reads it to its end; it reports whether the
// stream opened.
func (h *StreamHolder) once(ctx context.Context, slot int, id string) bool {
	if h.cfg.Protocol == ProtocolWebSocket {
		return h.onceWebSocket(ctx, slot, id)
	}
	return h.onceGRPC(ctx, slot, id)
}

func (h *StreamHolder) onceWebSocket(ctx context.Context, slot int, id string) bool {
	c, sc, open := h.dialWebSocket(ctx, slot, id)
	if c == nil {
		return false
	}
	defer c.Close()
	// gorilla/websocket reads take no context: the holder's end closes
	// the connection under the read, after a close frame (1001, going
	// away; WriteControl may run beside a read, conn.go).
	defer context.AfterFunc(ctx, func() {
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second))
		c.Close()
	})()
	h.hold(ctx, open, func() (time.Time, error) {
		_, _, err := c.ReadMessage()
		now := h.clk.Now()
		if _, graceful := wsCloseCode(err); err == nil || graceful {
			return sc.dataAt(now), err // a message or the close frame
		}
		return sc.endAt(now), err
	}, func(err error) (string, int) {
		if code, graceful := wsCloseCode(err); graceful {
			return CloseWS, code
		}
		return classify(err), -1
	}, func(at time.Time) {
		if h.stamped != nil {
			h.stamped(false, at, sc)
		}
	})
	return true
}

// wsCloseCode is the code of the close frame a WebSocket read ended with,
// if it ended with one. gorilla/websocket reports an EOF without a close
// frame as a close with code 1006, which RFC 6455 (7.4.1) forbids on the
// wire: that is an abrupt end, and classify sees its io.ErrUnexpectedEOF.
func wsCloseCode(err error) (int, bool) {
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code == websocket.CloseAbnormalClosure {
		return -1, false
	}
	return ce.Code, true
}

// dialWebSocket opens one WebSocket stream: its connection and open event,
// or a nil connection when the attempt failed (logged).
func (h *StreamHolder) dialWebSocket(ctx context.Context, slot int, id string) (*websocket.Conn, *stampConn, *StreamEvent) {
	dctx, cancel := context.WithTimeout(ctx, h.cfg.DialTimeout)
	defer cancel()
	var conn atomic.Pointer[stampConn]
	dctx = context.WithValue(dctx, stampKey{}, &conn)
	header := http.Header{probe.HeaderStream: {id}}
	if h.cfg.Host != "" {
		header.Set("Host", h.cfg.Host) // gorilla/websocket's Host override (client.go)
	}
	began := h.clk.Now()
	c, resp, err := h.dialer.DialContext(dctx, h.target, header)
	now := h.clk.Now()
	sc := conn.Load()
	if err != nil {
		kind, at := classify(err), now
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			kind, at = statusKind(resp.StatusCode), sc.dataAt(now)
		}
		h.log(&StreamEvent{Slot: slot, Stream: id, Kind: EventFail, At: at, Began: began, How: kind, Code: -1, Detail: err.Error()})
		return nil, nil, nil
	}
	at := sc.dataAt(now) // the 101's arrival
	if h.stamped != nil {
		h.stamped(true, at, sc)
	}
	open := &StreamEvent{Slot: slot, Stream: id, Kind: EventOpen, At: at, Pod: resp.Header.Get(probe.HeaderPod), Code: -1}
	if ns, err := strconv.ParseInt(resp.Header.Get(probe.HeaderTime), 10, 64); err == nil {
		open.ServerTime = time.Unix(0, ns)
	}
	return c, sc, open
}

// newWebSocketDialer is the dialer a holder opens WebSocket streams with:
// the default dialer's proxy, each attempt on a connection of its own from
// dial (stampDialer: a stampConn), and small buffers. A stream carries a
// short message every few seconds, and 10,000 of them each holding 4 KiB
// read and write buffers (the size most libraries fix) would be 80 MB of
// the holder's memory. Reads go through a 512-byte buffer, and writes
// (only the reply to a close frame, which gorilla/websocket's WriteControl
// frames in a buffer of its own) borrow one from a pool.
func newWebSocketDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *websocket.Dialer {
	return &websocket.Dialer{
		NetDialContext:  dial,
		Proxy:           http.ProxyFromEnvironment,
		ReadBufferSize:  512,
		WriteBufferSize: 512,
		WriteBufferPool: &sync.Pool{},
	}
}

// hold logs the open of a stream, reads it with read (which returns each
// message's or the end's stamp) until it fails, and logs its close as
// ended says; a close by ctx (the holder stopping) is not logged. closed,
// if not nil, is told the close's stamp first.
func (h *StreamHolder) hold(ctx context.Context, open *StreamEvent, read func() (time.Time, error), ended func(error) (string, int), closed func(time.Time)) {
	h.open.Add(1)
	h.log(open)
	var n int64
	var last time.Time
	for {
		at, err := read()
		if err == nil {
			n++
			last = at
			h.messages.Add(1)
			continue
		}
		h.open.Add(-1)
		if ctx.Err() != nil {
			return
		}
		if closed != nil {
			closed(at)
		}
		h.logClose(open, at, n, last, err, ended)
		return
	}
}

// logClose logs the close at at of the stream opened by open, after n
// messages, the last at last.
func (h *StreamHolder) logClose(open *StreamEvent, at time.Time, n int64, last time.Time, err error, ended func(error) (string, int)) {
	how, code := ended(err)
	h.log(&StreamEvent{Slot: open.Slot, Stream: open.Stream, Kind: EventClose, At: at, Pod: open.Pod, How: how, Code: code,
		Messages: n, LastMessage: last, Detail: err.Error()})
}

func (h *StreamHolder) onceGRPC(ctx context.Context, slot int, id string) bool {
	// One ClientConn per attempt: each slot is a client of its own (its own
	// TCP connection, as separate processes would have), and the holder's
	// policy, not the channel's, times the reconnects.
	// MinConnectTimeout bounds the connect, so that an unanswered SYN
	// fails the attempt (NewStream without WaitForReady fails once the
	// channel is in TRANSIENT_FAILURE) instead of waiting grpc-go's 20 s.
	creds := insecure.NewCredentials()
	if h.grpcTLS != nil {
		// credentials.NewTLS adds h2 to the ALPN list and runs the
		// handshake over the dialed stampConn, as a wss dial does.
		creds = credentials.NewTLS(h.grpcTLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: grpcbackoff.DefaultConfig, MinConnectTimeout: h.cfg.DialTimeout}),
	}
	if h.cfg.Host != "" {
		opts = append(opts, grpc.WithAuthority(h.cfg.Host))
	}
	// The connection is a stampConn, as a WebSocket's is: grpc-go reads it
	// in a goroutine of its own (http2Client.reader), so the last data
	// read when a call returns may be later than the frame it returned,
	// but never earlier, and never later than the return.
	began := h.clk.Now()
	var conn atomic.Pointer[stampConn]
	opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := h.dial(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		conn.Store(c.(*stampConn))
		return c, nil
	}))
	cc, err := grpc.NewClient("passthrough:///"+h.target, opts...)
	if err != nil {
		h.log(&StreamEvent{Slot: slot, Stream: id, Kind: EventFail, At: h.clk.Now(), Began: began, How: KindOther, Code: -1, Detail: err.Error()})
		return false
	}
	defer cc.Close()
	sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, probe.GRPCHeaderStream, id))
	defer cancel()
	dctx, dcancel := context.WithTimeout(sctx, h.cfg.DialTimeout)
	st, err := cc.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true}, probe.GRPCMethod)
	var md metadata.MD
	if err == nil {
		if err = st.SendMsg(&emptypb.Empty{}); err == nil {
			if err = st.CloseSend(); err == nil {
				md, err = headerWithin(dctx, st)
			}
		}
	}
	now := h.clk.Now()
	dcancel()
	if err != nil {
		h.log(&StreamEvent{Slot: slot, Stream: id, Kind: EventFail, At: now, Began: began, How: grpcFailKind(err), Code: -1, Detail: err.Error()})
		return false
	}
	at := conn.Load().dataAt(now) // the headers' arrival, or later
	pod := ""
	if v := md.Get(probe.GRPCHeaderPod); len(v) > 0 {
		pod = v[0]
	} else {
		// No pod in the header: an intermediary answered (grpc-go's
		// Header returns no error for a trailers-only or non-gRPC
		// response); the first receive says what it was.
		if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			h.log(&StreamEvent{Slot: slot, Stream: id, Kind: EventFail, At: at, Began: began, How: grpcFailKind(err), Code: -1, Detail: err.Error()})
			return false
		}
	}
	m := new(wrapperspb.StringValue)
	h.hold(ctx, &StreamEvent{Slot: slot, Stream: id, Kind: EventOpen, At: at, Pod: pod, Code: -1}, func() (time.Time, error) {
		err := st.RecvMsg(m)
		now, sc := h.clk.Now(), conn.Load()
		if err == nil {
			return sc.dataAt(now), nil // a message
		}
		return grpcEndAt(err, sc, now), err
	}, grpcCloseKind, nil)
	return true
}

// grpcEndAt stamps the end of an open gRPC stream that RecvMsg returned as
// err at now, on its connection sc (nil: none). An end that came in a frame
// (the server's trailers, an intermediary's RST_STREAM) is the last data
// read, stamped as it arrived (the kernel's stamp: stampConn), like a
// WebSocket's close frame; grpc-go's reader goroutine read it no later
// than RecvMsg returned. A broken transport carries no frame: it is the
// first sign of the connection's end (the end door, or the failed read).
func grpcEndAt(err error, sc *stampConn, now time.Time) time.Time {
	if how, _ := grpcCloseKind(err); Graceful(how) || grpcReset(err) {
		return sc.dataAt(now)
	}
	return sc.endAt(now)
}

// grpcReset tells whether err is grpc-go's status for an RST_STREAM frame
// (internal/transport/http2_client.go, handleRSTStream: "stream terminated
// by RST_STREAM with error code: …").
func grpcReset(err error) bool {
	s, _ := status.FromError(err)
	return strings.Contains(s.Message(), "stream terminated by RST_STREAM")
}

// grpcCloseKind names how an open gRPC stream ended, from RecvMsg's error,
// with the status code.
func grpcCloseKind(err error) (string, int) {
	switch s, _ := status.FromError(err); {
	case errors.Is(err, io.EOF):
		return CloseGRPCStatus, int(codes.OK)
	case grpcReset(err):
		// An intermediary reset the stream: no trailers came. grpc-go
		// makes a status of the RST_STREAM's code (handleRSTStream;
		// INTERNAL_ERROR becomes INTERNAL and REFUSED_STREAM UNAVAILABLE,
		// http_util.go http2ErrConvTab), which is not the server's; it is
		// tested first, so a refused stream is a reset, not a broken
		// transport.
		return CloseReset, int(s.Code())
	case s.Code() == codes.Unavailable:
		// The transport broke: no trailers came (grpc-go
		// internal/transport maps a lost connection to UNAVAILABLE).
		return grpcTransportKind(s.Message()), int(codes.Unavailable)
	default:
		return CloseGRPCStatus, int(s.Code())
	}
}

// headerWithin waits for the stream's response header, at most until ctx
// ends (grpc-go's Header blocks until the header or the stream's end).
func headerWithin(ctx context.Context, st grpc.ClientStream) (metadata.MD, error) {
	type res struct {
		md  metadata.MD
		err error
	}
	ch := make(chan res, 1)
	go func() {
		md, err := st.Header()
		ch <- res{md, err}
	}()
	select {
	case r := <-ch:
		return r.md, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// grpcTransportKind names an UNAVAILABLE from its message: grpc-go wraps
// the transport's error text (internal/transport/http2_client.go), and
// does not keep the error chain.
func grpcTransportKind(msg string) string {
	switch {
	case strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"):
		return CloseReset
	case strings.Contains(msg, "timeout"), strings.Contains(msg, "deadline"):
		return CloseTimeout
	}
	return CloseEOF
}

// grpcFailKind names a failed open: an HTTP status from an intermediary
// (grpc-go maps 502/503/504 to UNAVAILABLE with "unexpected HTTP status
// code received from server: 502", http_util.go), refused, timeout.
func grpcFailKind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	s, _ := status.FromError(err)
	msg := s.Message()
	if i := strings.Index(msg, "HTTP status code received from server: "); i >= 0 {
		rest := msg[i+len("HTTP status code received from server: "):]
		if len(rest) >= 3 {
			return "status_" + rest[:3]
		}
	}
	switch {
	case strings.Contains(msg, "connection refused"):
		return KindRefused
	case s.Code() == codes.DeadlineExceeded, strings.Contains(msg, "timeout"):
		return KindTimeout
	case strings.Contains(msg, "connection reset"):
		return KindReset
	case s.Code() == codes.Unavailable:
		return KindEOF
	}
	return KindOther
}
