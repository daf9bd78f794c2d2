package load

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/probe"
)

// SchemeDNS is the --url scheme of the gRPC load: dns:///NAME:PORT (or
// dns://SERVER/NAME:PORT) makes every request a unary gRPC call
// (probe.GRPCHello) through a grpc-go ClientConn with its own dns resolver
// and the round_robin policy, as a gRPC service's clients reach a headless
// Service. The pod that answered is the one the call was routed to.
const SchemeDNS = "dns"

// grpcServiceConfig picks round_robin: a call per ready address in turn.
// grpc-go's default, pick_first, would send everything to one pod.
const grpcServiceConfig = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// How a client connection ended (GRPCConn.End).
const (
	// ConnEndGoaway: the server sent GOAWAY first (its MaxConnectionAge,
	// or a graceful stop at SIGTERM); the connection closed after.
	ConnEndGoaway = "goaway"
	// ConnEndReset: the connection was reset (the pod's process exited
	// with the connection open, or its address went away).
	ConnEndReset = KindReset
	// ConnEndEOF: the server closed it without a GOAWAY.
	ConnEndEOF = KindEOF
	// ConnEndClient: the client closed it: its resolver's answer no
	// longer held the address, so the balancer shut the subchannel.
	ConnEndClient = "client"
	// ConnEndRefused: the dial was refused (no listener at the address).
	ConnEndRefused = KindRefused
	// ConnEndError: any other read or dial error.
	ConnEndError = "error"
)

// Caps on the gRPC log (one entry per connection and per resolution; a
// run's connections are a few per pod and re-dial, its resolutions one per
// lost connection at most every 30 s): beyond them entries are counted in
// GRPCLog.Dropped.
const (
	maxGRPCConns       = 1 << 16
	maxGRPCResolutions = 1 << 14
)

// GRPCLog is what the gRPC load's client did with its addresses, on the
// generator's clock: every answer its resolver gave the channel, every
// re-resolution the channel asked for, and every connection it opened and
// how it ended. Together with the last call each pod answered
// (PodStats.LastSent) it says which mechanism took the pod out of the
// client's use (Mechanism).
type GRPCLog struct {
	Resolutions []Resolution `json:"resolutions,omitempty"`
	// ResolveNow are the instants the channel asked its resolver to
	// resolve again: grpc-go does so when a connection is lost
	// (clientconn.go, addrConn's onClose → resolveNow), and its dns
	// resolver then asks DNS at most every 30 s
	// (internal/resolver/dns/dns_resolver.go, MinResolutionInterval).
	ResolveNow []time.Time `json:"resolve_now,omitempty"`
	Conns      []GRPCConn  `json:"conns,omitempty"`
	// Dropped counts entries beyond the log's caps.
	Dropped int64 `json:"dropped,omitempty"`
}

// Resolution is one answer of the resolver: the addresses it gave the
// channel, or the error it reported instead.
type Resolution struct {
	At    time.Time `json:"at"`
	Addrs []string  `json:"addrs,omitempty"`
	Err   string    `json:"err,omitempty"`
}

// GRPCConn is one TCP connection of the gRPC client.
type GRPCConn struct {
	ID   int64  `json:"id"`
	Addr string `json:"addr"`
	// Dialed is when the dial returned; Ended when the connection ended
	// (zero: still open, or open when the run ended).
	Dialed time.Time `json:"dialed"`
	Ended  time.Time `json:"ended,omitzero"`
	// GoAway is when a GOAWAY frame from the server was read, and its
	// error code (NO_ERROR for MaxConnectionAge and a graceful stop).
	GoAway     time.Time `json:"goaway,omitzero"`
	GoAwayCode string    `json:"goaway_code,omitempty"`
	// End is how it ended (ConnEnd*), empty while open.
	End string `json:"end,omitempty"`
}

// ConnAt is the last connection to addr that was open at t (dialed by t,
// not ended before it): the connection a call sent at t went out on.
func (l GRPCLog) ConnAt(addr string, t time.Time) (GRPCConn, bool) {
	for i := len(l.Conns) - 1; i >= 0; i-- {
		c := l.Conns[i]
		if c.Addr != addr || c.Dialed.After(t) || c.End == ConnEndRefused {
			continue
		}
		if c.Ended.IsZero() || !c.Ended.Before(t) {
			return c, true
		}
	}
	return GRPCConn{}, false
}

// FirstWithout is the first resolution at or after t whose answer did not
// hold addr; ok is false if every answer since held it (or none came).
func (l GRPCLog) FirstWithout(addr string, t time.Time) (Resolution, bool) {
	for _, r := range l.Resolutions {
		if r.At.Before(t) || r.Err != "" {
			continue
		}
		if !slices.Contains(r.Addrs, addr) {
			return r, true
		}
	}
	return Resolution{}, false
}

// Mechanism says, in words for a report, what ended the client's use of
// addr after its last call there at last: how the connection that call went
// out on ended.
func (l GRPCLog) Mechanism(addr string, last time.Time) string {
	c, ok := l.ConnAt(addr, last)
	if !ok {
		return "unknown: no connection to the address in the client's log"
	}
	switch c.End {
	case ConnEndGoaway:
		return "the server's GOAWAY (" + c.GoAwayCode + "): MaxConnectionAge or a graceful stop"
	case ConnEndReset:
		return "the connection was reset: the pod's process exited with it open"
	case ConnEndEOF:
		return "the server closed the connection without GOAWAY"
	case ConnEndClient:
		return "the client closed it: a DNS answer left the address out" + l.resolveCause(addr, c.Dialed)
	case "":
		return "the connection was still open when the run ended"
	default:
		return "the connection failed: " + c.End
	}
}

// resolveCause says what made the client ask for the answer that first
// left addr out after since: the connection end just before the
// re-resolution request that preceded it. grpc-go asks only when a
// connection is lost (clientconn.go, addrConn's onClose → resolveNow).
func (l GRPCLog) resolveCause(addr string, since time.Time) string {
	r, ok := l.FirstWithout(addr, since)
	if !ok {
		return ""
	}
	var asked time.Time
	for _, at := range l.ResolveNow {
		if !at.After(r.At) {
			asked = at
		}
	}
	if asked.IsZero() {
		return ""
	}
	// A GOAWAY is logged before the transport acts on it, its close after
	// (grpc-go asks for the re-resolution first): a connection counts from
	// its first sign of ending.
	lost := func(c *GRPCConn) time.Time {
		if !c.GoAway.IsZero() {
			return c.GoAway
		}
		return c.Ended
	}
	var cause *GRPCConn
	for i := range l.Conns {
		c := &l.Conns[i]
		if lost(c).IsZero() || lost(c).After(asked) || c.End == ConnEndClient {
			continue
		}
		if cause == nil || lost(c).After(lost(cause)) {
			cause = c
		}
	}
	if cause == nil {
		return ""
	}
	how := map[string]string{
		ConnEndGoaway:  "a GOAWAY (" + cause.GoAwayCode + ": MaxConnectionAge or a graceful stop)",
		ConnEndReset:   "a reset",
		ConnEndEOF:     "a close without GOAWAY",
		ConnEndRefused: "a refused dial",
	}[cause.End]
	if how == "" {
		how = "a failure (" + cause.End + ")"
	}
	return "; it asked DNS again after " + how + " on the connection to " + cause.Addr
}

// grpcLogger records into a GRPCLog under its own lock.
type grpcLogger struct {
	clk clock.PassiveClock
	mu  sync.Mutex
	log GRPCLog
	// closing is set when the generator closes its channel: connections
	// the channel closes from then on stay open in the log (censored at
	// the run's end), not ConnEndClient.
	closing bool
}

func (g *grpcLogger) snapshot() GRPCLog {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.log
	l.Resolutions = slices.Clone(l.Resolutions)
	l.ResolveNow = slices.Clone(l.ResolveNow)
	l.Conns = slices.Clone(l.Conns)
	return l
}

func (g *grpcLogger) resolved(s resolver.State, err error) {
	r := Resolution{At: g.clk.Now()}
	if err != nil {
		r.Err = err.Error()
	}
	// The dns resolver fills both Addresses and Endpoints (one address
	// each); either may be the one a resolver sets.
	for _, a := range s.Addresses {
		r.Addrs = append(r.Addrs, a.Addr)
	}
	for _, e := range s.Endpoints {
		for _, a := range e.Addresses {
			r.Addrs = append(r.Addrs, a.Addr)
		}
	}
	slices.Sort(r.Addrs)
	r.Addrs = slices.Compact(r.Addrs)
	g.mu.Lock()
	defer g.mu.Unlock()
	appendCapped(&g.log, &g.log.Resolutions, r, maxGRPCResolutions)
}

func (g *grpcLogger) resolveNow() {
	at := g.clk.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	appendCapped(&g.log, &g.log.ResolveNow, at, maxGRPCResolutions)
}

// open adds a connection and returns its index (-1 when the log is full).
func (g *grpcLogger) open(addr, end string) int {
	at := g.clk.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	c := GRPCConn{ID: int64(len(g.log.Conns)) + 1, Addr: addr, Dialed: at, End: end}
	if end != "" {
		c.Ended = at
	}
	if !appendCapped(&g.log, &g.log.Conns, c, maxGRPCConns) {
		return -1
	}
	return len(g.log.Conns) - 1
}

// appendCapped appends v to one of l's lists unless it holds max entries
// already, which l.Dropped counts instead; false then. g.mu held.
func appendCapped[T any](l *GRPCLog, list *[]T, v T, max int) bool {
	if len(*list) >= max {
		l.Dropped++
		return false
	}
	*list = append(*list, v)
	return true
}

// ended records the end of connection i as how, unless it ended already;
// an end after a GOAWAY is the GOAWAY's.
func (g *grpcLogger) ended(i int, how string) {
	at := g.clk.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if i < 0 || g.log.Conns[i].End != "" {
		return
	}
	c := &g.log.Conns[i]
	if how == ConnEndClient && g.closing {
		return
	}
	if !c.GoAway.IsZero() {
		how = ConnEndGoaway
	}
	c.End, c.Ended = how, at
}

func (g *grpcLogger) goaway(i int, code string) {
	at := g.clk.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if i < 0 || !g.log.Conns[i].GoAway.IsZero() {
		return
	}
	g.log.Conns[i].GoAway, g.log.Conns[i].GoAwayCode = at, code
}

// logBuilder wraps the target scheme's resolver so that its answers and
// the channel's re-resolution requests are logged; the resolver itself is
// grpc-go's, unchanged.
type logBuilder struct {
	inner resolver.Builder
	log   *grpcLogger
}

func (b logBuilder) Scheme() string { return b.inner.Scheme() }

func (b logBuilder) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	r, err := b.inner.Build(t, logClientConn{ClientConn: cc, log: b.log}, o)
	if err != nil {
		return nil, err
	}
	return logResolver{Resolver: r, log: b.log}, nil
}

type logClientConn struct {
	resolver.ClientConn
	log *grpcLogger
}

func (c logClientConn) UpdateState(s resolver.State) error {
	c.log.resolved(s, nil)
	return c.ClientConn.UpdateState(s)
}

func (c logClientConn) ReportError(err error) {
	c.log.resolved(resolver.State{}, err)
	c.ClientConn.ReportError(err)
}

type logResolver struct {
	resolver.Resolver
	log *grpcLogger
}

func (r logResolver) ResolveNow(o resolver.ResolveNowOptions) {
	r.log.resolveNow()
	r.Resolver.ResolveNow(o)
}

// logConn is a client connection whose end, and any GOAWAY the server
// sends on it, go to the log. Each read's bytes are handed to an HTTP/2
// framer (x/net/http2) that only looks for GOAWAY, and the read returns to
// grpc-go's transport only once the framer has parsed every frame those
// bytes completed: a GOAWAY is in the log before the transport acts on it
// (grpc-go closes the connection at once when no call is open on it).
type logConn struct {
	net.Conn
	log  *grpcLogger
	i    int
	feed *frameFeed
	once sync.Once
}

func newLogConn(c net.Conn, log *grpcLogger, i int) *logConn {
	f := &frameFeed{in: make(chan []byte), parsed: make(chan struct{}), stopped: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(f.stopped)
		fr := http2.NewFramer(nil, f)
		for {
			fm, err := fr.ReadFrame()
			if err != nil {
				// The connection ended, or a frame the framer refuses:
				// the transport reads on regardless.
				return
			}
			if ga, ok := fm.(*http2.GoAwayFrame); ok {
				log.goaway(i, ga.ErrCode.String())
			}
		}
	}()
	return &logConn{Conn: c, log: log, i: i, feed: f}
}

func (c *logConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.feed.give(b[:n])
	}
	if err != nil {
		c.end(connEndOf(err))
	}
	return n, err
}

func (c *logConn) Close() error {
	c.end(ConnEndClient)
	return c.Conn.Close()
}

func (c *logConn) end(how string) {
	c.once.Do(func() {
		c.log.ended(c.i, how)
		close(c.feed.quit)
	})
}

// frameFeed hands a connection's reads to its framer one at a time. The
// framer's goroutine reads it as an io.Reader; give returns when the framer
// asks for more than it was given, i.e. has parsed every whole frame.
type frameFeed struct {
	in      chan []byte
	parsed  chan struct{}
	stopped chan struct{} // the framer's goroutine returned
	quit    chan struct{} // the connection ended
	cur     []byte
	given   bool // the framer's side: a chunk was taken and not yet acknowledged
}

// give is called by the connection's one reader; b is not kept after it
// returns (the framer copies what it reads).
func (f *frameFeed) give(b []byte) {
	select {
	case f.in <- b:
	case <-f.stopped:
		return
	case <-f.quit:
		return
	}
	select {
	case <-f.parsed:
	case <-f.stopped:
	case <-f.quit:
	}
}

// Read is the framer's side.
func (f *frameFeed) Read(p []byte) (int, error) {
	if len(f.cur) == 0 {
		if f.given {
			f.given = false
			select {
			case f.parsed <- struct{}{}:
			case <-f.quit:
				return 0, io.EOF
			}
		}
		select {
		case f.cur = <-f.in:
			f.given = true
		case <-f.quit:
			return 0, io.EOF
		}
	}
	n := copy(p, f.cur)
	f.cur = f.cur[n:]
	return n, nil
}

// connEndOf names how a read or dial error ended a connection: a refusal,
// a reset or an EOF as classify names a request's failure, the client's own
// close, or another error.
func connEndOf(err error) string {
	if errors.Is(err, net.ErrClosed) {
		return ConnEndClient
	}
	switch k := classify(err); k {
	case KindRefused, KindReset, KindEOF:
		return k
	}
	return ConnEndError
}

// grpcClient is the generator's gRPC mode.
type grpcClient struct {
	cc  *grpc.ClientConn
	log *grpcLogger
}

// newGRPCClient builds the channel for a dns:// --url. grpc-go's resolver
// for the scheme is wrapped for the log; its dialer is a plain TCP dial
// bounded by the request timeout.
func newGRPCClient(cfg Config, clk clock.PassiveClock) (*grpcClient, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, err
	}
	inner := resolver.Get(u.Scheme)
	if inner == nil {
		return nil, errors.New("--url " + cfg.URL + ": grpc-go has no resolver for scheme " + u.Scheme)
	}
	log := &grpcLogger{clk: clk}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(grpcServiceConfig),
		grpc.WithResolvers(logBuilder{inner: inner, log: log}),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: cfg.Timeout}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				log.open(addr, connEndOf(err))
				return nil, err
			}
			i := log.open(addr, "")
			if i < 0 {
				// The log is full: nothing would record this
				// connection's end or its GOAWAY.
				return c, nil
			}
			return newLogConn(c, log, i), nil
		}),
	}
	if cfg.Host != "" {
		opts = append(opts, grpc.WithAuthority(cfg.Host))
	}
	cc, err := grpc.NewClient(cfg.URL, opts...)
	if err != nil {
		return nil, errors.New("--url " + cfg.URL + ": " + err.Error())
	}
	// Resolve and connect now rather than at the first call, so the first
	// calls do not all wait for DNS.
	cc.Connect()
	return &grpcClient{cc: cc, log: log}, nil
}

func (c *grpcClient) close() {
	c.log.mu.Lock()
	c.log.closing = true
	c.log.mu.Unlock()
	_ = c.cc.Close()
}

// hitGRPC is hit for the gRPC mode: one Hello call. The call is sent when
// Invoke is entered (s; a ready connection is picked at once while one
// exists) and answered when it returns (r): the probe read its clock
// between the two, as for HTTP.
func (g *Generator) hitGRPC(ctx context.Context, scheduled, began time.Time) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	var p peer.Peer
	out := new(wrapperspb.StringValue)
	s := g.clk.Now()
	err := g.grpc.cc.Invoke(ctx, probe.GRPCHello, new(emptypb.Empty), out, grpc.Peer(&p))
	r := g.clk.Now()
	if err != nil {
		g.finish(scheduled, began, grpcKind(err))
		return
	}
	pod, ns, ok := probe.ParseTrafficBody([]byte(out.GetValue()))
	if !ok {
		g.succeed(scheduled, began, s, r, "", 0, "")
		return
	}
	addr := ""
	if p.Addr != nil {
		addr = p.Addr.String()
	}
	g.succeed(scheduled, began, s, r, string(pod), ns, addr)
}

// grpcKind names the failure kind of a failed call. grpc-go's status
// errors do not wrap the transport's error, only its text (status.Error
// of a connection error, internal/transport), so the cause is read from the
// message as classify does for net/http's unexported errors.
func grpcKind(err error) string {
	st := status.Convert(err)
	switch st.Code() {
	case codes.DeadlineExceeded:
		return KindTimeout
	case codes.Unavailable:
		msg := st.Message()
		switch {
		case strings.Contains(msg, "connection refused"):
			return KindRefused
		case strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"):
			return KindReset
		case strings.Contains(msg, "EOF"):
			return KindEOF
		case strings.Contains(msg, "no route to host"), strings.Contains(msg, "network is unreachable"):
			return KindUnreachable
		}
	}
	return "grpc_" + strings.ToLower(strings.ReplaceAll(st.Code().String(), " ", "_"))
}

// waitAddrs asks DNS for the name of a dns:// target every 200 ms until it
// answers at least n addresses; false if ctx ended first. The authority of
// dns://SERVER/NAME:PORT is the server asked, as grpc-go's resolver does.
func waitAddrs(ctx context.Context, target string, n int) bool {
	u, err := url.Parse(target)
	if err != nil {
		return false
	}
	host, _, err := net.SplitHostPort(strings.TrimPrefix(u.Path, "/"))
	if err != nil {
		return false
	}
	r := net.DefaultResolver
	if u.Host != "" {
		server := u.Host
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	for {
		addrs, _ := r.LookupHost(ctx, host)
		if len(addrs) >= n {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}
