package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/probe"
)

// Limits of a load runner (epwindow load): it runs unattended in a pod, so
// its rate and its life are bounded whatever it is told.
const (
	// MaxRate is the most requests per second a runner sends.
	MaxRate = 5000
	// MaxLifetime is the furthest a runner's deadline may lie ahead.
	MaxLifetime = 24 * time.Hour
)

// The runner's HTTP endpoints, served on RunnerConfig.StatsListen.
const (
	// PathStats serves Stats as JSON.
	PathStats = "/stats"
	// PathClock serves the runner's clock like the probe's GET /clock, so
	// the tool reads both with one decoder.
	PathClock = "/clock"
	// PathHealthz answers 200 while the runner sends load.
	PathHealthz = "/healthz"
)

// StatsVersion is the version of the Stats document; readers refuse newer.
const StatsVersion = 1

// RunnerConfig is one load runner: the load, where its statistics are
// served, and when it stops.
type RunnerConfig struct {
	Load Config
	// StatsListen is the TCP address of the statistics endpoint.
	StatsListen string
	// Deadline is when the runner stops sending by itself, whether or not
	// anyone still reads it (the tool may have died), on the runner's own
	// clock: measure passes a duration (ParseDeadline counts it from the
	// runner's start), so clock skew between the tool and the node cannot
	// move it.
	Deadline time.Time
	// OnIdle, if set, is told when the deadline passed and the runner
	// went idle.
	OnIdle func(at time.Time)
	// Pod and Node name the runner in its Stats.
	Pod, Node string
	// Streams, if set, are long-lived streams the runner also holds to
	// Load.URL (epwindow load --streams); their events are in its Stats.
	Streams *StreamConfig
	// GRPC, if set, is a second load the runner sends beside Load: unary
	// gRPC calls to a dns:// target (epwindow load --grpc-url,
	// --grpc-rate), as a gRPC client in the cluster resolving a headless
	// Service; what it saw is Stats.GRPCClient.
	GRPC *Config
	// GRPCWaitAddrs, if above 0, holds the gRPC load back until DNS
	// answers the target's name with at least that many addresses
	// (--grpc-wait-addrs): grpc-go resolves once at the start and again
	// only when a connection is lost, so a client started while a
	// Deployment's pods were still turning ready would never learn of the
	// rest.
	GRPCWaitAddrs int
}

// Validate checks c at now; messages name the flag of epwindow load.
func (c RunnerConfig) Validate(now time.Time) error {
	if err := c.Load.Validate(); err != nil {
		return err
	}
	if math.IsNaN(c.Load.Rate) || c.Load.Rate > MaxRate {
		return fmt.Errorf("--rate (%v) must be at most %d requests per second", c.Load.Rate, MaxRate)
	}
	if c.StatsListen == "" {
		return errors.New("--stats-listen is required, e.g. :9090")
	}
	if _, _, err := net.SplitHostPort(c.StatsListen); err != nil {
		return fmt.Errorf("--stats-listen %q: %w", c.StatsListen, err)
	}
	if c.Deadline.IsZero() {
		return errors.New("--deadline is required: an RFC 3339 time or a duration from now")
	}
	if !c.Deadline.After(now) {
		return fmt.Errorf("--deadline %s has passed", c.Deadline.Format(time.RFC3339))
	}
	if c.Deadline.Sub(now) > MaxLifetime {
		return fmt.Errorf("--deadline %s is more than %s ahead", c.Deadline.Format(time.RFC3339), MaxLifetime)
	}
	if c.GRPC != nil {
		if !isGRPC(c.GRPC.URL) {
			return fmt.Errorf("--grpc-url %q: want a dns:///NAME:PORT target", c.GRPC.URL)
		}
		if err := c.GRPC.Validate(); err != nil {
			return fmt.Errorf("--grpc-url, --grpc-rate: %w", err)
		}
		if c.GRPC.Rate > MaxRate {
			return fmt.Errorf("--grpc-rate (%v) must be at most %d calls per second", c.GRPC.Rate, MaxRate)
		}
	}
	if c.Streams != nil {
		if c.Streams.URL != c.Load.URL {
			return errors.New("the streams go to --url")
		}
		return c.Streams.Validate()
	}
	return nil
}

// ParseDeadline reads --deadline: an RFC 3339 instant, or a Go duration
// counted from now.
func ParseDeadline(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--deadline %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (30m)", s)
	}
	if d <= 0 {
		return time.Time{}, fmt.Errorf("--deadline %s: a duration must be positive", s)
	}
	return now.Add(d), nil
}

// Stats is what a runner serves at GET /stats: per probe pod what it saw,
// on its own clock, and its failures since it started.
type Stats struct {
	Version int    `json:"version"`
	Pod     string `json:"pod,omitempty"`
	Node    string `json:"node,omitempty"`
	// Target is the one URL the runner sends to.
	Target string `json:"target"`
	// Now is the runner's clock as it answered; Started and Deadline are
	// on the same clock.
	Now      time.Time `json:"now"`
	Started  time.Time `json:"started"`
	Deadline time.Time `json:"deadline"`
	// IdleSince is when the deadline passed and the runner stopped
	// sending, on its clock (absent while it sends).
	IdleSince time.Time `json:"idle_since,omitzero"`
	// Sent, OK, Failed and Dropped count requests so far (Totals).
	Sent    int64   `json:"sent"`
	OK      int64   `json:"ok"`
	Failed  int64   `json:"failed"`
	Dropped int64   `json:"dropped"`
	Rate    float64 `json:"rate"`
	// Failures counts every failure so far by kind (FailureTotals).
	Failures map[string]int `json:"failures,omitempty"`
	// Pods is what the runner saw of each probe pod (by X-Epwindow-Pod).
	Pods []PodReport `json:"pods"`
	// Streams are the runner's stream events (epwindow load --streams),
	// on its clock, from number StreamsSince of its log on (the
	// streams_since query; the whole log without one), and StreamsNext the
	// number of the event after them: the cursor of the next read, so a
	// reader polling every second fetches what is new, not the whole log.
	// StreamsDropped counts the events its log had no room for, and
	// StreamsFirstDropped is the earliest instant of one: the log is
	// incomplete from then on.
	Streams             []StreamEvent `json:"streams,omitempty"`
	StreamsSince        int64         `json:"streams_since,omitempty"`
	StreamsNext         int64         `json:"streams_next,omitempty"`
	StreamsDropped      int64         `json:"streams_dropped,omitempty"`
	StreamsFirstDropped time.Time     `json:"streams_first_dropped,omitzero"`
	// GRPC is the gRPC client's log when Target is a dns:// target
	// (GRPCLog): its DNS answers, re-resolution requests and connections,
	// on the runner's clock.
	GRPC *GRPCLog `json:"grpc,omitempty"`
	// GRPCClient is the runner's second, gRPC load (RunnerConfig.GRPC).
	GRPCClient *GRPCClientStats `json:"grpc_client,omitempty"`
}

// GRPCClientStats is a runner's gRPC load beside its main one: its totals,
// per probe pod what it saw (by the pod's own address), and its log, all on
// the runner's clock.
type GRPCClientStats struct {
	Target   string         `json:"target"`
	Sent     int64          `json:"sent"`
	OK       int64          `json:"ok"`
	Failed   int64          `json:"failed"`
	Failures map[string]int `json:"failures,omitempty"`
	Pods     []PodReport    `json:"pods"`
	Log      GRPCLog        `json:"log"`
}

// grpcClientStats is g's GRPCClientStats (g in the gRPC mode).
func grpcClientStats(g *Generator) *GRPCClientStats {
	t := g.Totals()
	s := &GRPCClientStats{Target: g.cfg.URL, Sent: t.Sent, OK: t.OK, Failed: t.Failed, Failures: g.FailureTotals(), Pods: podReports(g)}
	s.Log, _ = g.GRPCLog()
	return s
}

// podReports is g's PodStats as JSON, by pod name; empty, not nil, when
// no pod answered yet.
func podReports(g *Generator) []PodReport {
	out := []PodReport{}
	for _, ps := range g.Pods() {
		out = append(out, podReport(ps))
	}
	return out
}

// QueryStreamsSince is /stats' query parameter for the first stream event
// to return (Stats.StreamsNext of the previous read).
const QueryStreamsSince = "streams_since"

// PodReport is PodStats as JSON: instants on the runner's clock, the skew
// estimate of the probe's clock against the runner's.
type PodReport struct {
	Pod       string    `json:"pod"`
	Responses int64     `json:"responses"`
	FirstSent time.Time `json:"first_sent"`
	First     time.Time `json:"first"`
	LastSent  time.Time `json:"last_sent"`
	Last      time.Time `json:"last"`
	// SkewOffsetNS is probe − runner, SkewUncertaintyNS its bound, from
	// SkewSamples responses (0: none carried the probe's time).
	SkewOffsetNS      int64     `json:"skew_offset_ns"`
	SkewUncertaintyNS int64     `json:"skew_uncertainty_ns"`
	SkewAt            time.Time `json:"skew_at"`
	SkewSamples       int       `json:"skew_samples"`
	// Addr is the address the last response came from (gRPC load only:
	// the pod's own address).
	Addr string `json:"addr,omitempty"`
}

// PodStats turns the report back into the generator's type.
func (p PodReport) PodStats() PodStats {
	return PodStats{Pod: p.Pod, Responses: p.Responses, FirstSent: p.FirstSent, First: p.First,
		LastSent: p.LastSent, Last: p.Last, Addr: p.Addr,
		Skew: Estimate{Offset: time.Duration(p.SkewOffsetNS), Uncertainty: time.Duration(p.SkewUncertaintyNS), At: p.SkewAt, Samples: p.SkewSamples}}
}

func podReport(ps PodStats) PodReport {
	return PodReport{Pod: ps.Pod, Responses: ps.Responses, FirstSent: ps.FirstSent, First: ps.First,
		LastSent: ps.LastSent, Last: ps.Last, SkewOffsetNS: int64(ps.Skew.Offset),
		SkewUncertaintyNS: int64(ps.Skew.Uncertainty), SkewAt: ps.Skew.At, SkewSamples: ps.Skew.Samples, Addr: ps.Addr}
}

// ParseStats decodes a Stats document, refusing a newer version.
func ParseStats(b []byte) (Stats, error) {
	var s Stats
	if err := json.Unmarshal(b, &s); err != nil {
		return Stats{}, fmt.Errorf("decode runner stats: %w", err)
	}
	if s.Version > StatsVersion || s.Version < 1 {
		return Stats{}, fmt.Errorf("runner stats version %d: this epwindow reads %d (use one epwindow version for tool and image)", s.Version, StatsVersion)
	}
	return s, nil
}

// StatsHandler serves the runner's endpoints for g (and its streams' h,
// nil without): /stats, /clock and /healthz; anything else is 404. Instants
// come from clk.
func StatsHandler(g *Generator, h *StreamHolder, cfg RunnerConfig, clk clock.PassiveClock) http.Handler {
	return statsHandler(g, nil, h, cfg, clk, &idleState{})
}

// statsHandler is StatsHandler for a runner that may go idle: once idle,
// /healthz answers 503 (the pod turns unready, so anyone listing it sees
// it has stopped) and /stats says since when.
// gg is the runner's gRPC load (RunnerConfig.GRPC), nil without.
func statsHandler(g, gg *Generator, h *StreamHolder, cfg RunnerConfig, clk clock.PassiveClock, idle *idleState) http.Handler {
	reply := func(w http.ResponseWriter, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
		_, _ = w.Write(append(b, '\n'))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathClock, func(w http.ResponseWriter, _ *http.Request) {
		reply(w, probe.ClockReplyAt(clk.Now()))
	})
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		if at := idle.get(); !at.IsZero() {
			http.Error(w, "idle: its deadline passed at "+at.Format(time.RFC3339Nano)+"; sending nothing", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+PathStats, func(w http.ResponseWriter, req *http.Request) {
		t := g.Totals()
		s := Stats{Version: StatsVersion, Pod: cfg.Pod, Node: cfg.Node, Target: cfg.Load.URL,
			Started: t.Start, Deadline: cfg.Deadline, Sent: t.Sent, OK: t.OK, Failed: t.Failed,
			Dropped: t.Dropped, Rate: t.Rate, Failures: g.FailureTotals(), Pods: podReports(g)}
		s.IdleSince = idle.get()
		if l, ok := g.GRPCLog(); ok {
			s.GRPC = &l
		}
		if gg != nil {
			s.GRPCClient = grpcClientStats(gg)
		}
		if h != nil {
			// A malformed cursor reads the whole log, as none does.
			since, _ := strconv.Atoi(req.URL.Query().Get(QueryStreamsSince))
			var next int
			s.Streams, next, s.StreamsDropped, s.StreamsFirstDropped = h.EventsSince(since)
			s.StreamsNext, s.StreamsSince = int64(next), int64(next-len(s.Streams))
		}
		s.Now = clk.Now() // last: every instant above is at or before it
		reply(w, s)
	})
	return mux
}

// RunRunner sends cfg.Load until cfg.Deadline passes on clk, serving
// StatsHandler on cfg.StatsListen meanwhile; ready, if set, gets the bound
// address once the deadline is armed and the endpoint listens. At the
// deadline it stops sending and idles: /stats keeps serving the final
// figures (IdleSince set) and /healthz answers 503, until ctx ends
// (SIGTERM); then it returns nil. It does not exit at the deadline because
// a runner runs in a Deployment's pod (restartPolicy Always): an exit, even
// 0, restarts it, and a restarted runner would send again or, given an
// instant for a deadline, refuse to start in a crash loop.
func RunRunner(ctx context.Context, cfg RunnerConfig, clk clock.Clock, ready func(net.Addr)) error {
	if err := cfg.Validate(clk.Now()); err != nil {
		return err
	}
	g, err := New(cfg.Load, clk)
	if err != nil {
		return err
	}
	var gg *Generator
	if cfg.GRPC != nil {
		if gg, err = New(*cfg.GRPC, clk); err != nil {
			return err
		}
	}
	gctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	// The deadline is armed before anything is sent.
	expired := clk.After(cfg.Deadline.Sub(clk.Now()))
	ln, err := net.Listen("tcp", cfg.StatsListen)
	if err != nil {
		return fmt.Errorf("--stats-listen %s: %w", cfg.StatsListen, err)
	}
	var h *StreamHolder
	if cfg.Streams != nil {
		if h, err = NewStreamHolder(*cfg.Streams, clk); err != nil {
			return err
		}
	}
	idle := &idleState{}
	srv := &http.Server{Handler: statsHandler(g, gg, h, cfg, clk, idle), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	generated := make(chan error, 1)
	go func() { generated <- g.Run(gctx) }()
	grpcDone := make(chan error, 1)
	go func() {
		if gg == nil {
			grpcDone <- nil
			return
		}
		if cfg.GRPCWaitAddrs > 0 && !waitAddrs(gctx, cfg.GRPC.URL, cfg.GRPCWaitAddrs) {
			grpcDone <- nil
			return
		}
		grpcDone <- gg.Run(gctx)
	}()
	// The streams stop with the load: at the deadline, or when told to.
	held := make(chan struct{})
	go func() {
		defer close(held)
		if h != nil {
			_ = h.Run(gctx)
		}
	}()
	if ready != nil {
		ready(ln.Addr())
	}
	shutdown := func() {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	}
	var runErr error
	select {
	case <-expired:
	case <-ctx.Done():
	case runErr = <-served:
		runErr = fmt.Errorf("stats endpoint: %w", runErr)
	}
	stopLoad()
	if err := <-generated; err != nil && runErr == nil {
		runErr = err
	}
	if err := <-grpcDone; err != nil && runErr == nil {
		runErr = err
	}
	<-held
	if runErr != nil || ctx.Err() != nil {
		shutdown()
		return runErr
	}
	// Deadline passed: idle, still reporting, until told to stop.
	at := idle.set(clk.Now())
	if cfg.OnIdle != nil {
		cfg.OnIdle(at)
	}
	select {
	case <-ctx.Done():
	case runErr = <-served:
		runErr = fmt.Errorf("stats endpoint: %w", runErr)
	}
	shutdown()
	return runErr
}

// idleState is when the runner went idle (zero while it sends).
type idleState struct {
	mu    sync.Mutex
	since time.Time
}

func (s *idleState) set(t time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.since = t
	return t
}

func (s *idleState) get() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.since
}
