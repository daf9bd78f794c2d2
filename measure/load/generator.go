package load

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/probe"
)

// The probe's response headers (DESIGN.md "The probe").
const (
	// HeaderPod carries the name of the pod that served the response.
	HeaderPod = probe.HeaderPod
	// HeaderTime carries the probe's wall clock as it answered, unix ns.
	HeaderTime = probe.HeaderTime
)

// maxPods bounds the per-pod table; responses from pods beyond it count in
// Totals.PodsOverflow only. A run sees replicas + one replacement per trial.
const maxPods = 1 << 14

// Generator sends GET requests to Config.URL at a constant rate and keeps
// what the responses say. Its methods are safe for concurrent use; the
// readers (Pod, Skew, Failures, Totals) may be called while Run runs.
type Generator struct {
	cfg    Config
	clk    clock.PassiveClock
	timers clock.Clock
	url    string
	pacer  ConstantPacer
	client *http.Client
	grpc   *grpcClient // the gRPC mode (a dns:// URL); nil for HTTP
	sem    chan struct{}

	running atomic.Bool
	start   atomic.Pointer[time.Time]
	// latest is the unix ns of the latest dispatch, for Totals.Rate.
	latest atomic.Int64
	// dispatched is the watermark for Settle: the scheduled instant (unix
	// ns) of the first request not yet sent or dropped; every request due
	// before it is in pending or has an outcome. It is math.MaxInt64 once
	// Run dispatches no more.
	dispatched                            atomic.Int64
	hits, sent, dropped, inFlight         atomic.Int64
	ok, failed, unattributed, podOverflow atomic.Int64
	latency, lag                          histogram

	mu       sync.Mutex
	pods     map[string]*PodStats
	failures *failureRing
	// pending holds the scheduled instant of each request in flight, by
	// sequence number, for Settle.
	pending map[uint64]time.Time
}

// New checks cfg and builds a Generator. Instants are read from clk; if clk
// is also a clock.Clock (clock.RealClock, a testing fake) its timers pace the
// requests, otherwise the real time does.
func New(cfg Config, clk clock.PassiveClock) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clk == nil {
		return nil, errors.New("load: nil clock")
	}
	cfg = cfg.withDefaults()
	timers, ok := clk.(clock.Clock)
	if !ok {
		timers = clock.RealClock{}
	}
	g := &Generator{
		cfg:      cfg,
		clk:      clk,
		timers:   timers,
		url:      cfg.URL,
		pacer:    ConstantPacer{Rate: cfg.Rate},
		sem:      make(chan struct{}, cfg.MaxConns),
		pods:     map[string]*PodStats{},
		failures: newFailureRing(cfg.FailureHistory),
		pending:  map[uint64]time.Time{},
	}
	if isGRPC(cfg.URL) {
		c, err := newGRPCClient(cfg, clk)
		if err != nil {
			return nil, err
		}
		g.grpc = c
		return g, nil
	}
	g.client = &http.Client{
		Transport: newTransport(cfg),
		// Report redirects as they are instead of following them.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return g, nil
}

func newTransport(cfg Config) *http.Transport {
	tlsConfig := cfg.TLS
	if cfg.Host != "" && (tlsConfig == nil || tlsConfig.ServerName == "") {
		if tlsConfig == nil {
			tlsConfig = &tls.Config{}
		} else {
			tlsConfig = tlsConfig.Clone()
		}
		host := cfg.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		tlsConfig.ServerName = host
	}
	return &http.Transport{
		// The URL is the ingress as reachable from here: no proxy.
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: cfg.Timeout}).DialContext,
		// One request per connection when KeepAlive is off: every request
		// then needs a fresh accept, which is what a dying pod refuses.
		DisableKeepAlives:   !cfg.KeepAlive,
		MaxIdleConns:        cfg.MaxConns,
		MaxIdleConnsPerHost: cfg.MaxConns,
		MaxConnsPerHost:     cfg.MaxConns,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: cfg.Timeout,
		DisableCompression:  true,
	}
}

// Run sends requests on the schedule until ctx is done, then waits for the
// requests in flight (each bounded by Config.Timeout) and returns nil. Run
// may be called once.
func (g *Generator) Run(ctx context.Context) error {
	if !g.running.CompareAndSwap(false, true) {
		return errors.New("load: Run called twice")
	}
	start := g.clk.Now()
	g.start.Store(&start)
	g.dispatched.Store(start.UnixNano())
	defer g.dispatched.Store(math.MaxInt64)

	if g.grpc != nil {
		// After the calls in flight (deferred below, so run first).
		defer g.grpc.close()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Requests in flight outlive ctx so that the last ones are classified
	// by what the server did, not by our stopping.
	reqCtx := context.WithoutCancel(ctx)
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	for hits := uint64(0); ; hits++ {
		wait, stop := g.pacer.Pace(g.clk.Since(start), hits)
		if stop {
			return nil
		}
		if wait > 0 {
			if timer == nil {
				timer = g.timers.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C():
			}
		} else if ctx.Err() != nil {
			return nil
		}
		due, _ := g.pacer.Due(hits)
		scheduled := start.Add(due)
		g.hits.Add(1)
		select {
		case g.sem <- struct{}{}:
		default:
			// Open loop: never queue behind slow responses.
			g.dropped.Add(1)
			g.recordFailure(scheduled, KindDropped)
			g.dispatched.Store(nextDue(g.pacer, start, hits))
			continue
		}
		g.sent.Add(1)
		g.inFlight.Add(1)
		g.latest.Store(g.clk.Now().UnixNano())
		g.mu.Lock()
		g.pending[hits] = scheduled
		g.mu.Unlock()
		// After pending holds this hit: whoever reads the watermark past it
		// finds it in pending or finished.
		g.dispatched.Store(nextDue(g.pacer, start, hits))
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.hit(reqCtx, scheduled)
			g.mu.Lock()
			delete(g.pending, hits)
			g.mu.Unlock()
			g.inFlight.Add(-1)
			<-g.sem
		}()
	}
}

// nextDue is the watermark once hit number hits is dispatched: the unix ns
// at which the next one is due, math.MaxInt64 if none can be scheduled.
func nextDue(p ConstantPacer, start time.Time, hits uint64) int64 {
	due, ok := p.Due(hits + 1)
	if !ok {
		return math.MaxInt64
	}
	return start.Add(due).UnixNano()
}

// hit sends one request due at scheduled and records its outcome.
// postBody is what a POST carries: a body makes the request non-idempotent,
// which is all that matters (see Config.Method).
const postBody = "epwindow\n"

func (g *Generator) hit(ctx context.Context, scheduled time.Time) {
	began := g.clk.Now()
	g.lag.add(began.Sub(scheduled))
	if g.grpc != nil {
		g.hitGRPC(ctx, scheduled, began)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()

	// s is stamped when the connection is ready, just before the request is
	// written, and r when the first response byte arrives: the probe reads
	// its clock between the two (see Estimate).
	var s, r time.Time
	trace := &httptrace.ClientTrace{
		GotConn:              func(httptrace.GotConnInfo) { s = g.clk.Now() },
		GotFirstResponseByte: func() { r = g.clk.Now() },
	}
	var body io.Reader
	if g.cfg.Method == http.MethodPost {
		b := g.cfg.Body
		if b == "" {
			b = postBody
		}
		body = strings.NewReader(b)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), g.cfg.Method, g.url, body)
	if err != nil {
		g.finish(scheduled, began, KindOther)
		return
	}
	if g.cfg.Host != "" {
		req.Host = g.cfg.Host
	}
	req.Close = !g.cfg.KeepAlive
	req.Header.Set("User-Agent", "epwindow-load")

	resp, err := g.client.Do(req)
	if err != nil {
		g.finish(scheduled, began, classify(err))
		return
	}
	// The trace hooks ran before Do returned a response (the read loop hands
	// the response over a channel), so s and r are safe to read here.
	if s.IsZero() {
		s = began
	}
	if r.IsZero() {
		r = g.clk.Now()
	}
	// The start of the body may be the probe's traffic body (its name and
	// clock); the rest is read and discarded.
	var head [probe.MaxTrafficBody]byte
	n, err := io.ReadFull(resp.Body, head[:])
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	if err == nil {
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody-int64(n)))
	}
	resp.Body.Close()
	switch {
	case err != nil:
		g.finish(scheduled, began, classify(err))
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		g.finish(scheduled, began, statusKind(resp.StatusCode))
	default:
		pod, ns := probeStamp(resp.Header, head[:n])
		g.succeed(scheduled, began, s, r, pod, ns, "")
	}
}

// probeStamp is the pod that answered and its clock (unix ns, 0 if none),
// from the probe's traffic body, else from the headers its other replies
// carry (and that other servers may set, as a test's do).
func probeStamp(h http.Header, body []byte) (string, int64) {
	if pod, ns, ok := probe.ParseTrafficBody(body); ok {
		return string(pod), ns
	}
	pod := h.Get(HeaderPod)
	if pod == "" {
		return "", 0
	}
	t, ok := parseProbeTime(h.Get(HeaderTime))
	if !ok {
		return pod, 0
	}
	return pod, t.UnixNano()
}

// finish records a failed request, due at scheduled and begun at began.
func (g *Generator) finish(scheduled, began time.Time, kind string) {
	g.latency.add(g.clk.Since(began))
	g.recordFailure(scheduled, kind)
	g.failed.Add(1) // after the record, as in succeed
}

// succeed records a 2xx response whose request went out at s and whose first
// byte came back at r, from pod ("" if none said) whose clock read ns (0 if
// unknown), at addr (the gRPC mode's peer; "" for HTTP).
func (g *Generator) succeed(scheduled, began, s, r time.Time, pod string, ns int64, addr string) {
	g.latency.add(g.clk.Since(began))
	// Counted last (defers run after the unlock below), so whoever reads
	// OK == n also finds all n responses in the per-pod stats.
	defer g.ok.Add(1)
	if pod == "" {
		g.unattributed.Add(1)
		if !g.cfg.UnattributedOK {
			g.recordFailure(scheduled, KindUnattributed)
		}
		return
	}
	p, hasTime := time.Unix(0, ns), ns > 0

	g.mu.Lock()
	defer g.mu.Unlock()
	ps := g.pods[pod]
	if ps == nil {
		if len(g.pods) >= maxPods {
			g.podOverflow.Add(1)
			return
		}
		ps = &PodStats{Pod: pod, FirstSent: s, First: r, LastSent: s, Last: r, Addr: addr}
		g.pods[pod] = ps
	}
	ps.Responses++
	// Responses finish out of order: keep the extremes, not the latest call.
	if r.Before(ps.First) {
		ps.FirstSent, ps.First = s, r
	}
	if r.After(ps.Last) {
		ps.LastSent, ps.Last = s, r
		if addr != "" {
			ps.Addr = addr
		}
	}
	if hasTime {
		ps.Skew = merge(ps.Skew, sample(s, r, p))
	}
}

// Settle waits until every request scheduled before t has been dispatched
// and has an outcome, so that Failures up to t is complete: the dispatch loop
// can wake late (a busy machine) and send a request due before t only after
// t, and a request to a vanished pod address can hang until its timeout (no
// route to host takes seconds) and is only then filed, under its scheduled
// instant. It returns at once when the generator is not running, or when
// everything due before t was dispatched and nothing older than t is in
// flight; when t has passed on the generator's clock, at the latest after
// the loop's wake-up and the request timeout.
func (g *Generator) Settle(ctx context.Context, t time.Time) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// The watermark is read before pending: a hit below it was put in
		// pending before the watermark passed it (see Run).
		busy := g.running.Load() && g.dispatched.Load() < t.UnixNano()
		g.mu.Lock()
		for _, at := range g.pending {
			if at.Before(t) {
				busy = true
				break
			}
		}
		g.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
}

func (g *Generator) recordFailure(at time.Time, kind string) {
	g.mu.Lock()
	g.failures.add(at, kind)
	g.mu.Unlock()
}

// GRPCLog is the gRPC mode's log so far (see GRPCLog); ok is false for
// HTTP load.
func (g *Generator) GRPCLog() (GRPCLog, bool) {
	if g.grpc == nil {
		return GRPCLog{}, false
	}
	return g.grpc.log.snapshot(), true
}

// Pod returns what was seen of pod (by its X-Epwindow-Pod name); ok is false
// if no response was attributed to it.
func (g *Generator) Pod(pod string) (PodStats, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ps := g.pods[pod]
	if ps == nil {
		return PodStats{}, false
	}
	return *ps, true
}

// Pods returns every pod seen so far, by name.
func (g *Generator) Pods() []PodStats {
	g.mu.Lock()
	out := make([]PodStats, 0, len(g.pods))
	for _, ps := range g.pods {
		out = append(out, *ps)
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// Skew returns the tightest clock-offset estimate of pod (probe − tool); ok
// is false if none of its responses carried a readable X-Epwindow-Time. To
// get one estimate per node, pass the node's pods' estimates to Best.
func (g *Generator) Skew(pod string) (Estimate, bool) {
	ps, ok := g.Pod(pod)
	if !ok || ps.Skew.Samples == 0 {
		return Estimate{}, false
	}
	return ps.Skew, true
}

// Failures counts, by kind, the failed requests whose scheduled instant lies
// in [from, to) on the tool's clock; a zero from or to leaves that side open.
// A request counts once it has finished, so a window is complete only
// Config.Timeout after to; it is complete from Totals().FailuresKeptSince on.
func (g *Generator) Failures(from, to time.Time) map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failures.count(from, to)
}

// FailureTotals counts every failed request so far by kind, the ones the
// failure history has forgotten included: a reader that keeps two snapshots
// knows what failed in between without reading the generator's clock.
func (g *Generator) FailureTotals() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failures.total()
}

// FailureEvents lists the kept failed requests whose scheduled instant lies
// in [from, to) on the tool's clock, in order of that instant; a zero from or
// to leaves that side open. Completeness is as for Failures.
func (g *Generator) FailureEvents(from, to time.Time) []Failure {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failures.list(from, to)
}

// Totals returns a snapshot of the run so far.
func (g *Generator) Totals() Totals {
	t := Totals{
		Hits:         g.hits.Load(),
		Sent:         g.sent.Load(),
		Dropped:      g.dropped.Load(),
		OK:           g.ok.Load(),
		Failed:       g.failed.Load(),
		Unattributed: g.unattributed.Load(),
		InFlight:     g.inFlight.Load(),
		PodsOverflow: g.podOverflow.Load(),
	}
	if start := g.start.Load(); start != nil {
		t.Start = *start
	}
	if ns := g.latest.Load(); ns != 0 {
		t.Latest = time.Unix(0, ns)
		if d := t.Latest.Sub(t.Start); t.Sent > 1 && d > 0 {
			t.Rate = float64(t.Sent) / d.Seconds()
		}
	}
	var q []time.Duration
	t.LatencyN, q = g.latency.quantiles(0.5, 0.9, 0.99)
	t.LatencyP50, t.LatencyP90, t.LatencyP99 = q[0], q[1], q[2]
	t.LatencyMax = time.Duration(g.latency.max.Load())
	_, q = g.lag.quantiles(0.5, 0.99)
	t.LagP50, t.LagP99 = q[0], q[1]
	t.LagMax = time.Duration(g.lag.max.Load())
	g.mu.Lock()
	t.FailuresKeptSince = g.failures.keptSince()
	g.mu.Unlock()
	return t
}
