package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Control paths: requests to them are counted as requests but not as
// traffic, so that the kubelet's probes and the tool's reads never extend
// the window they measure.
const (
	PathHealthz  = "/healthz"
	PathTimeline = "/timeline"
	PathClock    = "/clock"
	PathPrestop  = "/prestop"
	PathRelease  = "/release"
)

// Response headers on every response.
const (
	// HeaderPod names the pod that answered (--pod-name), on the probe's
	// control endpoints and a WebSocket's 101; traffic replies say it in
	// the body (AppendTrafficBody).
	HeaderPod = "X-Epwindow-Pod"
	// HeaderTime is the probe's wall clock (plus --clock-offset) in unix ns,
	// taken as late as possible before the response is written, where
	// HeaderPod is.
	HeaderTime = "X-Epwindow-Time"
)

// Config is the probe's typed configuration (cmd/epwindow's probe flags).
type Config struct {
	// Listen is the TCP address to serve on (--listen).
	Listen string
	// ListenDelay postpones opening the listener (--listen-delay): an app
	// that loads its configuration for a while before it listens. Until
	// then the port refuses connections, control endpoints included, so a
	// readiness probe on it fails, as it would for such an app.
	ListenDelay time.Duration
	// PodName is reported in every response and the timeline (--pod-name).
	PodName string
	// Hold is how long to keep serving after SIGTERM unless released (--hold).
	Hold time.Duration
	// ExitOnSigterm closes the listener at SIGTERM and exits without holding:
	// the fast-exiting app of the incidents (--exit-on-sigterm).
	ExitOnSigterm bool
	// RefuseOnSigterm closes the listener at SIGTERM, so new connections
	// are refused, and exits only after Hold (or a release): the app that
	// stops accepting at SIGTERM while it drains, its address still routed.
	RefuseOnSigterm bool
	// IgnoreSigterm stamps SIGTERM and otherwise ignores it: the probe keeps
	// serving, /healthz stays 200, and only SIGKILL at the end of the grace
	// period (exit 137) or a cancelled context stops it — the app whose
	// shutdown is paid out of the kill deadline (--ignore-sigterm).
	IgnoreSigterm bool
	// ReadyAfterSigterm keeps /healthz at 200 after SIGTERM
	// (--ready-after-sigterm); by default it turns 503, so the kubelet marks
	// the pod not Ready and its endpoint stops serving.
	ReadyAfterSigterm bool
	// ClockOffset is added to every instant reported: fault injection for
	// skew tests (--clock-offset).
	ClockOffset time.Duration
	// TerminationLog is where the timeline goes at exit (--termination-log);
	// empty: nowhere.
	TerminationLog string
	// MaxPeers caps the per-peer records (--max-peers).
	MaxPeers int
	// ShutdownTimeout bounds the graceful drain of in-flight requests
	// (--shutdown-timeout); connections still busy after it are closed.
	ShutdownTimeout time.Duration
	// StreamDrain is what happens to open streams at termination
	// (--stream-drain; zero: none). See streams.go.
	StreamDrain StreamDrain
	// StreamInterval is the period of each stream's message
	// (--stream-interval; zero: DefaultStreamInterval).
	StreamInterval time.Duration
	// MaxStreamRecords caps the ended streams kept individually
	// (--max-stream-records).
	MaxStreamRecords int
	// GRPCListen, if set, is a second TCP address where a grpc.Server serves
	// the stream service and Hello on its own (--grpc-listen), so that
	// GRPCMaxConnectionAge applies; the main port serves them too, behind
	// net/http, without it.
	GRPCListen string
	// GRPCMaxConnectionAge is grpc-go's keepalive MaxConnectionAge on the
	// gRPC port (--grpc-max-connection-age; 0: none): a connection gets
	// GOAWAY at that age (±10% jitter), and is closed
	// GRPCMaxConnectionAgeGrace later (--grpc-max-connection-age-grace;
	// 0: grpc-go's default, infinite).
	GRPCMaxConnectionAge      time.Duration
	GRPCMaxConnectionAgeGrace time.Duration
	// GRPCListener, if set, is an open listener served instead of
	// GRPCListen (tests).
	GRPCListener net.Listener
	// Clock is the probe's clock; nil means the real one. Tests inject a fake.
	Clock clock.Clock
}

// Defaults of the probe's flags.
const (
	DefaultListen          = ":8080"
	DefaultHold            = 60 * time.Second
	DefaultTerminationLog  = "/dev/termination-log"
	DefaultMaxPeers        = 1024
	DefaultShutdownTimeout = 5 * time.Second
)

// Validate checks the configuration; errors name the flag to change.
func (c Config) Validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("--listen must not be empty (e.g. :8080)"))
	}
	if c.PodName == "" {
		errs = append(errs, errors.New("--pod-name (or POD_NAME) must not be empty"))
	}
	if c.Hold < 0 {
		errs = append(errs, fmt.Errorf("--hold (%s) must not be negative", c.Hold))
	}
	if c.ListenDelay < 0 {
		errs = append(errs, fmt.Errorf("--listen-delay (%s) must not be negative", c.ListenDelay))
	}
	if c.MaxPeers < 0 {
		errs = append(errs, fmt.Errorf("--max-peers (%d) must not be negative", c.MaxPeers))
	}
	if n := btoi(c.IgnoreSigterm) + btoi(c.ExitOnSigterm) + btoi(c.RefuseOnSigterm); n > 1 {
		errs = append(errs, errors.New("--ignore-sigterm, --exit-on-sigterm and --refuse-on-sigterm exclude each other"))
	}
	if c.StreamInterval < 0 {
		errs = append(errs, fmt.Errorf("--stream-interval (%s) must not be negative", c.StreamInterval))
	}
	if c.MaxStreamRecords < 0 {
		errs = append(errs, fmt.Errorf("--max-stream-records (%d) must not be negative", c.MaxStreamRecords))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout (%s) must be positive", c.ShutdownTimeout))
	}
	if c.GRPCMaxConnectionAge < 0 || c.GRPCMaxConnectionAgeGrace < 0 {
		errs = append(errs, errors.New("--grpc-max-connection-age and --grpc-max-connection-age-grace must not be negative"))
	}
	if c.GRPCListen == "" && c.GRPCListener == nil && (c.GRPCMaxConnectionAge > 0 || c.GRPCMaxConnectionAgeGrace > 0) {
		errs = append(errs, errors.New("--grpc-max-connection-age applies to the gRPC port only: set --grpc-listen too"))
	}
	return errors.Join(errs...)
}

// Run waits cfg.ListenDelay, then listens on cfg.Listen and serves until
// done (see Serve). Nothing listens during the delay: connections are
// refused, the readiness probe's included.
func Run(ctx context.Context, cfg Config, sigterm <-chan struct{}, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return serve(ctx, func(ctx context.Context) (net.Listener, error) {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen on %q (--listen): %w", cfg.Listen, err)
		}
		return ln, nil
	}, cfg, sigterm, log)
}

// Serve runs the probe on ln (cfg.Listen is ignored) until it is done, and
// closes ln. ln is already open, so cfg.ListenDelay only postpones serving
// it (the kernel still completes handshakes into its backlog); Run is what
// refuses connections during the delay.
//
// When sigterm is closed (or receives) the probe stamps SIGTERM, turns
// /healthz to 503 (unless cfg.ReadyAfterSigterm) and keeps serving until POST
// /release or until cfg.Hold has passed; a release that came before SIGTERM
// ends the hold at once. With cfg.ExitOnSigterm it closes the listener at
// SIGTERM instead. Then it drains (in-flight requests finish, bounded by
// cfg.ShutdownTimeout), stamps Exit and writes the timeline to
// cfg.TerminationLog; a failure to write is logged, not returned. SIGTERM
// during the listen delay ends the probe without listening: there is nothing
// to hold open.
//
// Cancelling ctx means "stop now" (a second signal): the server is closed
// without draining, and the termination message is still written. Serve
// returns nil in all these cases; it returns an error only if serving fails.
func Serve(ctx context.Context, ln net.Listener, cfg Config, sigterm <-chan struct{}, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		ln.Close()
		return err
	}
	opened := false
	err := serve(ctx, func(context.Context) (net.Listener, error) {
		opened = true
		return ln, nil
	}, cfg, sigterm, log)
	if !opened {
		ln.Close()
	}
	return err
}

// serve is Serve with the listener opened by listen after cfg.ListenDelay;
// cfg is valid.
func serve(ctx context.Context, listen func(context.Context) (net.Listener, error), cfg Config, sigterm <-chan struct{}, log *slog.Logger) error {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	p := &server{
		cfg:      cfg,
		clk:      clk,
		rec:      NewRecorder(clk, cfg.PodName, cfg.ClockOffset, cfg.MaxPeers),
		log:      log,
		podValue: []string{cfg.PodName},
		released: make(chan struct{}),
	}
	p.streams = newStreamHub(cfg, clk, p.rec)
	if !p.waitToListen(ctx, sigterm) {
		return nil
	}
	ln, err := listen(ctx)
	if err != nil {
		p.finish("listen failed")
		return err
	}
	if cfg.GRPCListen != "" || cfg.GRPCListener != nil {
		gln, err := listenGRPC(ctx, cfg)
		if err != nil {
			ln.Close()
			p.finish("listen failed")
			return err
		}
		p.grpcPort = startGRPCPort(gln, cfg, p.streams)
		log.Info("grpc port", "addr", gln.Addr().String(), "max_connection_age", cfg.GRPCMaxConnectionAge.String(),
			"max_connection_age_grace", cfg.GRPCMaxConnectionAgeGrace.String())
	}
	opened := p.rec.ListenerOpen()
	// HTTP/1.1 and h2c (prior knowledge) on the one port: gRPC streams and
	// an ingress's h2c backend connections (Traefik's serversscheme h2c)
	// arrive as HTTP/2 without TLS.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:     p.streams.handler(p),
		Protocols:   &protocols,
		ConnContext: p.connContext,
		// No ReadHeaderTimeout: net/http arms and disarms a read deadline
		// for it on every request (readRequest in net/http server.go, two
		// runtime timer updates), which cost the probe 6% of its CPU per
		// keep-alive request against a bare handler (make bench,
		// 2026-12-01: cpu-ratio 0.85 with it, 0.91 without). A bare app
		// has none either, and the probe, like the app it stands in for,
		// sits behind an ingress or kube-proxy for one run: a stalled
		// header holds one goroutine, never a stamp. No IdleTimeout, so
		// idle keep-alive connections from an ingress stay open, as they
		// would to a real app.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// serveErr is where the serve loop's end is awaited; nil (never ready)
	// once the probe closed the listener itself.
	serveErr := served
	log.Info("started", "pod", cfg.PodName, "addr", ln.Addr().String(), "listener_open", opened,
		"listen_delay", cfg.ListenDelay.String(), "hold", cfg.Hold.String(),
		"exit_on_sigterm", cfg.ExitOnSigterm, "ignore_sigterm", cfg.IgnoreSigterm, "clock_offset", cfg.ClockOffset.String())

	fail := func(err error) error {
		p.stop(ctx, srv)
		p.finish("serve failed")
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	}

	// Before SIGTERM.
	select {
	case err := <-serveErr:
		return fail(err)
	case <-ctx.Done():
		p.stop(ctx, srv)
		p.finish("stopped before sigterm")
		return nil
	case <-sigterm:
	}
	at, _ := p.rec.Sigterm()
	if cfg.IgnoreSigterm {
		// Nothing changes for the clients: no listener closed, /healthz
		// stays 200. The kubelet's SIGKILL ends it.
		log.Info("sigterm", "at", at, "ignored", true)
		select {
		case err := <-serveErr:
			return fail(err)
		case <-ctx.Done():
			p.stop(ctx, srv)
			p.finish("stopped while ignoring sigterm")
			return nil
		}
	}
	p.terminating.Store(true)
	p.streams.sigterm(at)
	if (cfg.StreamDrain.Mode == DrainGoaway || cfg.RefuseOnSigterm) && !cfg.ExitOnSigterm {
		// The gRPC port as grpc-go's GracefulStop at SIGTERM: its listener
		// closes and its connections get GOAWAY.
		p.grpcPort.goaway()
	}
	if cfg.StreamDrain.Mode == DrainGoaway && !cfg.ExitOnSigterm {
		// GOAWAY on every HTTP/2 connection: net/http's Shutdown starts the
		// HTTP/2 server's graceful shutdown (h2_bundle.go,
		// startGracefulShutdown), which also closes the listener, as
		// grpc-go's GracefulStop does. It returns once the streams have
		// ended (at exit); Serve returns now, as expected.
		goaway, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		go func() { _ = srv.Shutdown(goaway) }()
		serveErr = nil
		log.Info("goaway", "at", at)
	}

	if cfg.ExitOnSigterm || cfg.RefuseOnSigterm {
		// Close the listener before anything else, so that new connections
		// are refused from here on (and before the log line says so);
		// in-flight requests still finish in the drain.
		_ = ln.Close()
		log.Info("sigterm", "at", at, "exit_on_sigterm", cfg.ExitOnSigterm, "refuse_on_sigterm", cfg.RefuseOnSigterm,
			"listener_closed", true, "hold", cfg.Hold.String())
		if cfg.ExitOnSigterm {
			p.endStreams(ctx)
			p.shutdown(ctx, srv)
			p.finish("exit on sigterm")
			return nil
		}
		// Close the idle keep-alive connections too, and let each active
		// one close after its response, as an app that exits or drains with
		// http.Server.Shutdown does (SetKeepAlivesEnabled(false) closes
		// idle conns: net/http/server.go). A data plane's pooled upstream
		// connection would otherwise keep reaching a pod that refuses new
		// ones, and a canary that "refuses from SIGTERM on" would never
		// fail a request through Traefik, which pools them.
		srv.SetKeepAlivesEnabled(false)
		// Serve returns now that its listener is closed: expected.
		serveErr = nil
	} else {
		log.Info("sigterm", "at", at, "hold", cfg.Hold.String(), "ready_after_sigterm", cfg.ReadyAfterSigterm)
	}

	hold := clk.NewTimer(cfg.Hold)
	defer hold.Stop()
	select {
	case <-p.released:
		// Logged by the handler, where it was stamped.
	case <-hold.C():
		log.Info("hold expired", "at", p.rec.HoldExpired(), "hold", cfg.Hold.String())
	case err := <-serveErr:
		return fail(err)
	case <-ctx.Done():
		p.stop(ctx, srv)
		p.finish("stopped during hold")
		return nil
	}
	p.endStreams(ctx)
	p.shutdown(ctx, srv)
	p.finish("drained")
	return nil
}

// server is the probe's HTTP handler and its state.
type server struct {
	cfg         Config
	clk         clock.Clock
	rec         *Recorder
	streams     *streamHub
	grpcPort    *grpcPort // nil without --grpc-listen
	log         *slog.Logger
	podValue    []string // shared header value; net/http never mutates it
	terminating atomic.Bool

	releaseOnce sync.Once
	released    chan struct{}
}

// waitToListen waits out cfg.ListenDelay and reports whether to open the
// listener: SIGTERM or a cancelled ctx during the delay ends the probe
// without it (the termination message is written).
func (p *server) waitToListen(ctx context.Context, sigterm <-chan struct{}) bool {
	if p.cfg.ListenDelay <= 0 {
		return true
	}
	p.log.Info("waiting to listen", "pod", p.cfg.PodName, "listen_delay", p.cfg.ListenDelay.String())
	t := p.clk.NewTimer(p.cfg.ListenDelay)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-sigterm:
		at, _ := p.rec.Sigterm()
		p.log.Info("sigterm", "at", at, "listening", false)
		p.finish("sigterm before listening")
	case <-ctx.Done():
		p.finish("stopped before listening")
	}
	return false
}

// shutdown drains srv (Shutdown closes the listener first, then waits for
// in-flight requests) within cfg.ShutdownTimeout, then closes what is left.
// Cancelling ctx cuts the drain short.
func (p *server) shutdown(ctx context.Context, srv *http.Server) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ShutdownTimeout)
	defer cancel()
	grpcDone := make(chan struct{})
	go func() {
		defer close(grpcDone)
		p.grpcPort.drain(ctx, p.cfg.ShutdownTimeout)
	}()
	defer func() { <-grpcDone }()
	err := srv.Shutdown(ctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		p.log.Warn("drain incomplete, closing remaining connections", "shutdown_timeout", p.cfg.ShutdownTimeout.String())
	case errors.Is(err, context.Canceled):
		p.log.Warn("drain cut short by a second signal, closing remaining connections")
	}
	// Shutdown may also fail because the listener was already closed
	// (--exit-on-sigterm); either way nothing may outlive Serve.
	srv.Close()
}

// endStreams ends the open streams as --stream-drain says, within
// cfg.ShutdownTimeout: net/http's Shutdown neither knows hijacked WebSocket
// connections nor ends a gRPC stream that never finishes by itself.
func (p *server) endStreams(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ShutdownTimeout)
	defer cancel()
	p.streams.exit(ctx)
}

// stop is "stop now": open streams end at once (reset with
// --stream-drain none), then every connection is closed.
func (p *server) stop(ctx context.Context, srv *http.Server) {
	p.endStreams(context.WithoutCancel(ctx))
	p.grpcPort.stop()
	srv.Close()
}

// timeline is the recorder's timeline with the stream log.
func (p *server) timeline() Timeline {
	tl := p.rec.Timeline()
	tl.Streams = p.streams.log()
	return tl
}

// finish stamps Exit, writes the termination message and logs the exit.
func (p *server) finish(reason string) {
	at := p.rec.Exit()
	tl := p.timeline()
	if path := p.cfg.TerminationLog; path != "" {
		if err := WriteTerminationLog(path, tl); err != nil {
			p.log.Warn("termination message not written", "err", err.Error())
		}
	}
	p.log.Info("exit", "at", at, "reason", reason, "accepts", tl.Accepts, "requests", tl.Requests,
		"traffic_accepts_after_sigterm", tl.TrafficAcceptsAfterSigterm,
		"traffic_requests_after_sigterm", tl.TrafficRequestsAfterSigterm)
}

type connKey struct{}

// connContext stamps the accept: http.Server calls it on its accept loop
// right after Listener.Accept returns (net/http server.go, Serve).
func (p *server) connContext(ctx context.Context, c net.Conn) context.Context {
	ctx = context.WithValue(ctx, netConnKey{}, c)
	return context.WithValue(ctx, connKey{}, p.rec.Accept(peerAddr(c)))
}

// peerAddr is the connection's remote IP (the port is dropped: one peer is
// one address, however many connections it opens).
func peerAddr(c net.Conn) netip.Addr { return addrOf(c.RemoteAddr()) }

// addrOf is a remote address's IP.
func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// ServeHTTP answers traffic on every path but the control paths.
func (p *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(*Conn)
	if c == nil { // not served by Serve's http.Server (e.g. httptest)
		c = &Conn{}
	}
	switch r.URL.Path {
	case PathHealthz:
		p.rec.Request(c, false)
		if p.terminating.Load() && !p.cfg.ReadyAfterSigterm {
			p.reply(w, http.StatusServiceUnavailable, textPlain, []byte("terminating\n"))
			return
		}
		p.reply(w, http.StatusOK, textPlain, []byte("ok\n"))
	case PathTimeline:
		p.rec.Request(c, false)
		if !getOrHead(w, r) {
			return
		}
		b, err := json.Marshal(p.timeline())
		if err != nil {
			http.Error(w, "encode timeline", http.StatusInternalServerError)
			return
		}
		p.reply(w, http.StatusOK, appJSON, append(b, '\n'))
	case PathClock:
		p.rec.Request(c, false)
		if !getOrHead(w, r) {
			return
		}
		now := p.rec.Now()
		b, _ := json.Marshal(ClockReplyAt(now))
		p.reply(w, http.StatusOK, appJSON, append(b, '\n'))
	case PathPrestop:
		p.rec.Request(c, false)
		p.prestop(w, r)
	case PathRelease:
		p.rec.Request(c, false)
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST "+PathRelease+" ends the hold", http.StatusMethodNotAllowed)
			return
		}
		at, first := p.rec.Release()
		if first {
			p.releaseOnce.Do(func() { close(p.released) })
			p.log.Info("released", "at", at, "after_sigterm", p.terminating.Load())
		}
		p.reply(w, http.StatusOK, textPlain, []byte("released\n"))
	default:
		// The request's own stamp dates the response too: any probe-clock
		// instant between the client's send and receive serves the skew
		// estimate (DESIGN "Clock skew"), and a second clock read per
		// request was a measurable share of the probe's cost (make bench).
		at := p.rec.Request(c, true)
		p.replyTraffic(w, at)
	}
}

// clockReply is GET /clock's body.
// ClockReply is GET /clock's body: the witness's wall clock, as a time and
// in unix ns, which measure reads for the skew estimate. The probe, the
// load runners and the sidecar all answer it.
type ClockReply struct {
	Time   time.Time `json:"time"`
	UnixNS int64     `json:"unix_ns"`
}

// ClockReplyAt is the clock reply stamped at now.
func ClockReplyAt(now time.Time) ClockReply {
	return ClockReply{Time: now.Round(0), UnixNS: now.UnixNano()}
}

// prestop stamps PrestopCalled (first call wins) and, with ?sleep=D, sleeps D
// before answering, so the same binary serves a sleeping-preStop workload.
func (p *server) prestop(w http.ResponseWriter, r *http.Request) {
	// The call is stamped even if its sleep is malformed: the kubelet did
	// call it, and that is the instant the tool needs.
	at, first := p.rec.Prestop()
	var sleep time.Duration
	if s := r.URL.Query().Get("sleep"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			p.log.Warn("prestop", "at", at, "first", first, "bad_sleep", s)
			http.Error(w, fmt.Sprintf("sleep=%q: want a non-negative duration such as 5s", s), http.StatusBadRequest)
			return
		}
		sleep = d
	}
	p.log.Info("prestop", "at", at, "first", first, "sleep", sleep.String())
	if sleep > 0 {
		t := p.clk.NewTimer(sleep)
		select {
		case <-t.C():
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	p.reply(w, http.StatusOK, textPlain, []byte("prestop\n"))
}

// Content types, as shared header values (net/http does not mutate them).
var (
	textPlain = []string{"text/plain; charset=utf-8"}
	appJSON   = []string{"application/json"}
)

// reply writes a response with the probe's headers; the time header is
// taken last, just before the header is written.
func (p *server) reply(w http.ResponseWriter, code int, contentType []string, body []byte) {
	p.replyAt(w, code, contentType, body, p.rec.Now())
}

// replyAt writes a response with the probe's headers, X-Epwindow-Time
// being at (probe clock plus offset).
func (p *server) replyAt(w http.ResponseWriter, code int, contentType []string, body []byte, at time.Time) {
	h := w.Header()
	h["Content-Type"] = contentType
	h[HeaderPod] = p.podValue
	var buf [20]byte
	h[HeaderTime] = []string{string(strconv.AppendInt(buf[:0], at.UnixNano(), 10))}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// replyTraffic answers a traffic request with its stamps in the body
// (AppendTrafficBody): no header of the probe's own, so that net/http neither
// copies the handler's header map (Header.Clone in WriteHeader, done
// whenever a handler touched w.Header()) nor sorts and writes more lines,
// which were most of the probe's own cost per request (make bench).
func (p *server) replyTraffic(w http.ResponseWriter, at time.Time) {
	var buf [MaxTrafficBody]byte
	_, _ = w.Write(AppendTrafficBody(buf[:0], p.cfg.PodName, at))
}

// getOrHead answers 405 to anything but GET and HEAD.
func getOrHead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
