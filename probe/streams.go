package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/utils/clock"
)

// PathStream is where the probe accepts WebSocket (RFC 6455) streams.
const PathStream = "/stream"

// The probe's gRPC stream service: one server-streaming method that takes
// google.protobuf.Empty and sends google.protobuf.StringValue messages (the
// well-known types, so neither side needs generated code). It is served over
// h2c on the probe's one port, beside HTTP/1.1.
const (
	GRPCService = "epwindow.v1.Streams"
	GRPCMethod  = "/" + GRPCService + "/Watch"
	// GRPCHeaderPod is the response-header metadata key naming the pod.
	GRPCHeaderPod = "x-epwindow-pod"
	// GRPCHeaderStream is the request metadata key of the client's stream
	// id (HeaderStream's twin): the probe records it with the stream.
	GRPCHeaderStream = "x-epwindow-stream"
)

// HeaderStream is the WebSocket request header carrying the client's id
// for one stream. Ingresses forward it like any end-to-end header, so the
// probe's record of a stream and the client's can be matched one to one
// through any hop (the probe's peer is the hop's address, not the
// client's).
const HeaderStream = "X-Epwindow-Stream"

// maxClientID bounds a recorded client id (a header is the client's to
// choose; the termination message has 4 KiB).
const maxClientID = 40

func clientID(v string) string {
	if len(v) > maxClientID {
		return v[:maxClientID]
	}
	return v
}

// Stream protocols as recorded.
const (
	ProtoWebSocket = "websocket"
	ProtoGRPC      = "grpc"
)

// How a stream ended, as the probe saw it.
const (
	// EndAppClose: the probe closed it gracefully (a WebSocket close frame
	// with Code; a gRPC stream ended with status Code, 0 = OK).
	EndAppClose = "app_close"
	// EndProcessExit: the probe exited with the stream open and reset its
	// connection (SO_LINGER 0): what the kubelet's SIGKILL does to an app's
	// streams, and what --stream-drain none does at exit.
	EndProcessExit = "process_exit"
	// EndPeerClose: the peer ended it gracefully (a WebSocket close frame
	// with Code; a gRPC cancellation).
	EndPeerClose = "peer_close"
	// EndPeerGone: the connection broke without a close frame (EOF, reset,
	// write error): the client or an intermediary dropped it.
	EndPeerGone = "peer_gone"
)

// WebSocket close codes the probe sends (RFC 6455 section 7.4.1; 1012 is
// in the IANA registry the RFC set up).
const (
	// CodeGoingAway (1001): the server is going away; --stream-drain goaway.
	CodeGoingAway = int(websocket.StatusGoingAway)
	// CodeServiceRestart (1012): reconnect, the service restarts;
	// --stream-drain close and close-jittered.
	CodeServiceRestart = int(websocket.StatusServiceRestart)
)

// DrainMode is what the probe does with its open streams when it terminates.
type DrainMode string

// Drain modes (--stream-drain).
const (
	// DrainNone leaves streams alone: they die with the process, by reset.
	DrainNone DrainMode = "none"
	// DrainClose closes every stream at SIGTERM (after the preStop).
	DrainClose DrainMode = "close"
	// DrainCloseJittered closes each stream at SIGTERM + U(0, Spread).
	DrainCloseJittered DrainMode = "close-jittered"
	// DrainGoaway sends HTTP/2 GOAWAY (and WebSocket 1001) at SIGTERM and
	// lets gRPC streams run until the probe exits, where they end with OK.
	// Like grpc-go's GracefulStop (server.go), GOAWAY goes with closing the
	// listener: new connections are refused from SIGTERM on.
	DrainGoaway DrainMode = "goaway"
)

// StreamDrain is --stream-drain.
type StreamDrain struct {
	Mode DrainMode
	// Spread is close-jittered's DUR.
	Spread time.Duration
}

// String renders d as the flag takes it.
func (d StreamDrain) String() string {
	if d.Mode == "" {
		return string(DrainNone)
	}
	if d.Mode == DrainCloseJittered {
		return fmt.Sprintf("%s=%s", d.Mode, d.Spread)
	}
	return string(d.Mode)
}

// ParseStreamDrain parses none, close, close-jittered=DUR or goaway.
func ParseStreamDrain(s string) (StreamDrain, error) {
	mode, arg, hasArg := strings.Cut(s, "=")
	switch DrainMode(mode) {
	case DrainNone, DrainClose, DrainGoaway:
		if hasArg {
			return StreamDrain{}, fmt.Errorf("--stream-drain %q: %s takes no =DUR", s, mode)
		}
		return StreamDrain{Mode: DrainMode(mode)}, nil
	case DrainCloseJittered:
		d, err := time.ParseDuration(arg)
		if !hasArg || err != nil || d <= 0 {
			return StreamDrain{}, fmt.Errorf("--stream-drain %q: want close-jittered=DUR with a positive DUR, e.g. close-jittered=5s", s)
		}
		return StreamDrain{Mode: DrainCloseJittered, Spread: d}, nil
	}
	return StreamDrain{}, fmt.Errorf("--stream-drain %q: want none, close, close-jittered=DUR or goaway", s)
}

// Stream defaults.
const (
	DefaultStreamInterval   = time.Second
	DefaultMaxStreamRecords = 4096
)

// StreamLog is the probe's record of its streams, in Timeline.Streams.
type StreamLog struct {
	Drain string `json:"drain"`
	// Opened counts every stream; Open those still open at Now.
	Opened int64 `json:"opened"`
	Open   int64 `json:"open"`
	// OpenAtSigterm counts the streams open when SIGTERM was stamped.
	OpenAtSigterm int64 `json:"open_at_sigterm"`
	// Ended counts ended streams by how (End* constants).
	Ended map[string]int64 `json:"ended,omitempty"`
	// Records has the open streams and the latest ended ones (at most
	// --max-stream-records ended; RecordsDropped counts older ones let go).
	// The termination message carries none of them (4 KiB): it carries
	// Ends instead.
	Records        []StreamRecord `json:"records,omitempty"`
	RecordsDropped int64          `json:"records_dropped,omitempty"`
	// Ends is the termination message's compact form of the records of
	// streams that ended at or after SIGTERM and had a client id: what
	// /timeline can no longer tell once the probe has exited (with
	// --stream-drain none they end at the exit). The latest that fit are
	// kept; EndsDropped counts the rest.
	Ends        []StreamEnd `json:"ends,omitempty"`
	EndsDropped int         `json:"ends_dropped,omitempty"`
}

// StreamEnd is one ended stream in the termination message: the client's
// id, the end (probe clock, unix ns, as StreamRecord.Ended) and how.
type StreamEnd struct {
	Client string `json:"c"`
	EndNS  int64  `json:"e"`
	How    string `json:"h"`
}

// ends is the compact list of l's records that ended at or after since and
// carry a client id, in the order of l.Records (oldest end first).
func (l *StreamLog) ends(since time.Time) []StreamEnd {
	var out []StreamEnd
	for _, r := range l.Records {
		if r.Ended == nil || r.Client == "" || r.Ended.Before(since) {
			continue
		}
		out = append(out, StreamEnd{Client: r.Client, EndNS: r.Ended.UnixNano(), How: r.How})
	}
	return out
}

// StreamRecord is one stream. Opened is stamped when the upgrade or RPC
// reached the handler, Ended when the probe decided or saw its end (before
// it writes a close frame or resets): probe clock plus offset, ~µs.
type StreamRecord struct {
	ID       uint64 `json:"id"`
	Protocol string `json:"protocol"`
	Peer     string `json:"peer"`
	// Client is the id the client sent (HeaderStream, GRPCHeaderStream).
	Client string     `json:"client,omitempty"`
	Opened time.Time  `json:"opened"`
	Ended  *time.Time `json:"ended,omitempty"`
	How    string     `json:"how,omitempty"`
	// Code is the WebSocket close code or the gRPC status code sent or
	// received; absent for abrupt ends.
	Code     *int  `json:"code,omitempty"`
	Messages int64 `json:"messages"`
}

// streamEnd is an instruction to a stream's goroutine.
type streamEnd struct {
	abrupt bool
	code   int
	// after delays a graceful end (close-jittered).
	after time.Duration
}

// stream is one open stream's state; its goroutine owns everything but rec,
// which hub.mu guards.
type stream struct {
	rec  StreamRecord
	end  chan streamEnd // buffered 1: the first instruction wins
	conn net.Conn       // the TCP connection, for a reset at exit
	done chan struct{}  // closed when the goroutine has recorded the end
}

// streamHub serves and records the probe's streams.
type streamHub struct {
	clk      clock.Clock
	rec      *Recorder
	pod      string
	drain    StreamDrain
	interval time.Duration
	grpc     *grpc.Server

	mu         sync.Mutex
	nextID     uint64
	open       map[uint64]*stream
	ended      []StreamRecord // ring of at most maxRecords
	endedNext  int
	maxRecords int
	dropped    int64
	opened     int64
	atSigterm  int64
	counts     map[string]int64
	// draining is set at SIGTERM for close modes: streams opened later get
	// the drain at once. exiting is set at exit: every stream opened later
	// is ended at once.
	draining, exiting bool
	drainStart        time.Time
}

func newStreamHub(cfg Config, clk clock.Clock, rec *Recorder) *streamHub {
	h := &streamHub{
		clk:        clk,
		rec:        rec,
		pod:        cfg.PodName,
		drain:      cfg.StreamDrain,
		interval:   cfg.StreamInterval,
		open:       make(map[uint64]*stream),
		maxRecords: cfg.MaxStreamRecords,
		counts:     make(map[string]int64),
	}
	if h.drain.Mode == "" {
		h.drain.Mode = DrainNone
	}
	if h.interval <= 0 {
		h.interval = DefaultStreamInterval
	}
	h.grpc = grpc.NewServer()
	h.grpc.RegisterService(&streamsDesc, h)
	return h
}

// watcher is the handler type of streamsDesc.
type watcher interface {
	watch(grpc.ServerStream) error
	hello(context.Context, *emptypb.Empty) (*wrapperspb.StringValue, error)
}

var streamsDesc = grpc.ServiceDesc{
	ServiceName: GRPCService,
	HandlerType: (*watcher)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Hello",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			if icpt == nil {
				return srv.(watcher).hello(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: GRPCHello}, func(ctx context.Context, req any) (any, error) {
				return srv.(watcher).hello(ctx, req.(*emptypb.Empty))
			})
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler:       func(srv any, s grpc.ServerStream) error { return srv.(watcher).watch(s) },
	}},
}

// isGRPC tells a gRPC request (HTTP/2, content-type application/grpc) from
// the rest, as grpc-go's own ServeHTTP example does (server.go, ServeHTTP).
func isGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// message is the periodic payload: pod name, sequence number, probe time in
// unix ns.
func (h *streamHub) message(seq int64) string {
	return h.pod + " " + strconv.FormatInt(seq, 10) + " " + strconv.FormatInt(h.rec.Now().UnixNano(), 10)
}

// begin registers a new stream; its Opened is at.
func (h *streamHub) begin(at time.Time, proto, peerAddr, client string, conn net.Conn) *stream {
	s := &stream{
		rec:  StreamRecord{Protocol: proto, Peer: peerAddr, Client: clientID(client), Opened: at.Round(0)},
		end:  make(chan streamEnd, 1),
		conn: conn,
		done: make(chan struct{}),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextID++
	s.rec.ID = h.nextID
	h.opened++
	h.open[s.rec.ID] = s
	switch {
	case h.exiting:
		s.end <- h.exitEnd()
	case h.draining:
		s.end <- h.drainEnd(at)
	}
	return s
}

// finish records a stream's end (stamped by the caller at the door).
func (h *streamHub) finish(s *stream, at time.Time, how string, code *int, messages int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.open, s.rec.ID)
	r := s.rec
	r.Ended = instant(at)
	r.How = how
	r.Code = code
	r.Messages = messages
	h.counts[how]++
	if h.maxRecords > 0 {
		if len(h.ended) < h.maxRecords {
			h.ended = append(h.ended, r)
		} else {
			h.ended[h.endedNext] = r
			h.endedNext = (h.endedNext + 1) % h.maxRecords
			h.dropped++
		}
	} else {
		h.dropped++
	}
	close(s.done)
}

// drainEnd is the end a close mode gives a stream at now; h.mu held.
func (h *streamHub) drainEnd(now time.Time) streamEnd {
	switch h.drain.Mode {
	case DrainGoaway:
		return streamEnd{code: CodeGoingAway}
	case DrainCloseJittered:
		// Uniform over [SIGTERM, SIGTERM+Spread]: a stream opened during
		// the spread draws from what is left of it.
		left := h.drain.Spread - now.Sub(h.drainStart)
		if left <= 0 {
			return streamEnd{code: CodeServiceRestart}
		}
		return streamEnd{code: CodeServiceRestart, after: rand.N(left)}
	}
	return streamEnd{code: CodeServiceRestart}
}

// exitEnd is the end every stream still open gets at exit; h.mu held.
func (h *streamHub) exitEnd() streamEnd {
	if h.drain.Mode == DrainNone {
		return streamEnd{abrupt: true}
	}
	return streamEnd{code: CodeGoingAway}
}

// sigterm starts the drain. It counts the open streams, then, in the close
// modes, tells each of them how to end (gRPC streams in goaway mode are
// left to run: GOAWAY is the server's, see serve).
func (h *streamHub) sigterm(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.atSigterm = int64(len(h.open))
	if h.drain.Mode == DrainNone {
		return
	}
	h.draining = true
	h.drainStart = at
	for _, s := range h.open {
		if h.drain.Mode == DrainGoaway && s.rec.Protocol == ProtoGRPC {
			continue
		}
		select {
		case s.end <- h.drainEnd(at):
		default:
		}
	}
}

// exit ends every open stream (reset with --stream-drain none, a graceful
// end otherwise) and waits until each has recorded its end or ctx is done.
func (h *streamHub) exit(ctx context.Context) {
	h.mu.Lock()
	h.exiting = true
	var pending []*stream
	for _, s := range h.open {
		e := h.exitEnd()
		// A pending jittered close would come later than exit: replace it.
		select {
		case <-s.end:
		default:
		}
		s.end <- e
		pending = append(pending, s)
	}
	h.mu.Unlock()
	for _, s := range pending {
		select {
		case <-s.done:
		case <-ctx.Done():
			return
		}
	}
}

// log renders the StreamLog.
func (h *streamHub) log() *StreamLog {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := &StreamLog{
		Drain:          h.drain.String(),
		Opened:         h.opened,
		Open:           int64(len(h.open)),
		OpenAtSigterm:  h.atSigterm,
		RecordsDropped: h.dropped,
	}
	if len(h.counts) > 0 {
		l.Ended = make(map[string]int64, len(h.counts))
		for k, v := range h.counts {
			l.Ended[k] = v
		}
	}
	l.Records = make([]StreamRecord, 0, len(h.open)+len(h.ended))
	// Oldest ended first, then the open ones.
	l.Records = append(l.Records, h.ended[h.endedNext:]...)
	l.Records = append(l.Records, h.ended[:h.endedNext]...)
	for _, s := range h.open {
		l.Records = append(l.Records, s.rec)
	}
	if len(l.Records) == 0 {
		l.Records = nil
	}
	return l
}

// reset closes conn with SO_LINGER 0, so the peer gets an RST, not a FIN:
// what a killed process's sockets do when data is unread or in flight.
func reset(conn net.Conn) {
	if conn == nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// serveWebSocket upgrades r and runs the stream until it ends.
func (h *streamHub) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	conn, _ := r.Context().Value(netConnKey{}).(net.Conn)
	// No origin check: the clients are load generators and ingresses, not
	// browsers (coder/websocket accept.go, authenticateOrigin).
	// The 101 carries the probe's headers, so a client knows the pod (and
	// a clock sample) before the first message.
	w.Header()[HeaderPod] = []string{h.pod}
	w.Header()[HeaderTime] = []string{strconv.FormatInt(h.rec.Now().UnixNano(), 10)}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept has answered
	}
	s := h.begin(h.rec.Now(), ProtoWebSocket, r.RemoteAddr, r.Header.Get(HeaderStream), conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The reader sees the peer's close frame or the connection's end; the
	// messages it receives are ignored.
	read := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				read <- err
				return
			}
		}
	}()
	tick := h.clk.NewTimer(h.interval)
	defer tick.Stop()
	var sent int64
	var delay clock.Timer
	var delayed <-chan time.Time
	var pendingCode int
	for {
		select {
		case <-tick.C():
			tick.Reset(h.interval)
			if err := c.Write(ctx, websocket.MessageText, []byte(h.message(sent+1))); err != nil {
				h.finish(s, h.rec.Now(), EndPeerGone, nil, sent)
				c.CloseNow()
				return
			}
			sent++
		case err := <-read:
			at := h.rec.Now()
			if code := int(websocket.CloseStatus(err)); code >= 0 {
				h.finish(s, at, EndPeerClose, &code, sent)
			} else {
				h.finish(s, at, EndPeerGone, nil, sent)
			}
			c.CloseNow()
			return
		case e := <-s.end:
			if e.abrupt {
				h.finish(s, h.rec.Now(), EndProcessExit, nil, sent)
				reset(conn)
				c.CloseNow()
				return
			}
			if e.after > 0 {
				if delay != nil {
					delay.Stop()
				}
				delay = h.clk.NewTimer(e.after)
				delayed, pendingCode = delay.C(), e.code
				continue
			}
			h.closeWebSocket(s, c, e.code, sent)
			return
		case <-delayed:
			h.closeWebSocket(s, c, pendingCode, sent)
			return
		}
	}
}

// closeWebSocket records a graceful end and sends the close frame; Close
// waits for the peer's close frame (coder/websocket close.go: at most 5 s).
func (h *streamHub) closeWebSocket(s *stream, c *websocket.Conn, code int, sent int64) {
	h.finish(s, h.rec.Now(), EndAppClose, &code, sent)
	_ = c.Close(websocket.StatusCode(code), "pod terminating")
}

// watch is the gRPC method: it sends a message every interval until the
// stream ends.
func (h *streamHub) watch(ss grpc.ServerStream) error {
	ctx := ss.Context()
	at := h.rec.Now()
	if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
		return err
	}
	conn, _ := ctx.Value(netConnKey{}).(net.Conn)
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	client := ""
	if v := metadata.ValueFromIncomingContext(ctx, GRPCHeaderStream); len(v) > 0 {
		client = v[0]
	}
	s := h.begin(at, ProtoGRPC, addr, client, conn)
	if err := ss.SendHeader(metadata.Pairs(GRPCHeaderPod, h.pod)); err != nil {
		h.finish(s, h.rec.Now(), EndPeerGone, nil, 0)
		return err
	}
	tick := h.clk.NewTimer(h.interval)
	defer tick.Stop()
	var sent int64
	var delay clock.Timer
	var delayed <-chan time.Time
	ok := 0 // codes.OK
	for {
		select {
		case <-tick.C():
			tick.Reset(h.interval)
			if err := ss.SendMsg(wrapperspb.String(h.message(sent + 1))); err != nil {
				h.finish(s, h.rec.Now(), EndPeerGone, nil, sent)
				return err
			}
			sent++
		case <-ctx.Done():
			// A cancelled RPC (RST_STREAM CANCEL) and a broken connection
			// look the same from here.
			how := EndPeerGone
			if errors.Is(ctx.Err(), context.Canceled) {
				how = EndPeerClose
			}
			h.finish(s, h.rec.Now(), how, nil, sent)
			return ctx.Err()
		case e := <-s.end:
			if e.abrupt {
				h.finish(s, h.rec.Now(), EndProcessExit, nil, sent)
				reset(conn)
				return errors.New("probe exiting")
			}
			if e.after > 0 {
				if delay != nil {
					delay.Stop()
				}
				delay = h.clk.NewTimer(e.after)
				delayed = delay.C()
				continue
			}
			h.finish(s, h.rec.Now(), EndAppClose, &ok, sent)
			return nil // status OK, END_STREAM
		case <-delayed:
			h.finish(s, h.rec.Now(), EndAppClose, &ok, sent)
			return nil
		}
	}
}

// netConnKey carries the accepted net.Conn in a request's context (set by
// the server's ConnContext), for the reset at exit.
type netConnKey struct{}

// handler routes stream requests to the hub and everything else to next.
// A stream's opening counts as a traffic request on its connection: it is
// the pod being routed to.
func (h *streamHub) handler(next *server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case isGRPC(r):
			if c, ok := r.Context().Value(connKey{}).(*Conn); ok {
				next.rec.Request(c, true)
			}
			h.grpc.ServeHTTP(w, r)
		case r.URL.Path == PathStream:
			if c, ok := r.Context().Value(connKey{}).(*Conn); ok {
				next.rec.Request(c, true)
			}
			h.serveWebSocket(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
