package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/probe"
)

// Defaults of the sidecar's settings.
const (
	DefaultInterval = 10 * time.Millisecond
	// DefaultMaxCPU is the share of one core the dumps may take. A dump
	// costs the kernel's walk of the TCP established hash table (ms on a
	// large host whose table the pod shares) plus under 1 µs a socket
	// listed (TIME_WAIT included; docs/sidecar.md "Cost"): when that is more
	// than a quarter of the interval, the polls space out instead of taking
	// the app's CPU.
	DefaultMaxCPU   = 0.25
	DefaultListen   = ":9091"
	DefaultMaxPeers = probe.DefaultMaxPeers
)

// Config is the sidecar's settings.
type Config struct {
	// Ports are the app's ports (--port): at least one, 1-65535, none the
	// sidecar's own.
	Ports []int
	// Interval is the time between two socket dumps (--interval).
	Interval time.Duration
	// MaxCPU caps the dumps' share of a core (--max-cpu): after a dump that
	// took d, the next waits at least d·(1/MaxCPU − 1), even past Interval.
	MaxCPU float64
	// Listen is the sidecar's own HTTP address (--listen).
	Listen   string
	PodName  string
	MaxPeers int
	// TerminationLog is where the timeline is written at exit (empty: nowhere).
	TerminationLog string

	// Clock is the sidecar's clock; nil means the real one.
	Clock clock.Clock
	// Dump reads the sockets; nil means the kernel's (KernelDumper).
	Dump Dumper
	// PassiveOpens reads the namespace's accepted-connection counter; nil
	// means /proc/net/snmp's.
	PassiveOpens func() (uint64, error)
}

// Validate checks the settings, naming the flag to change.
func (c Config) Validate() error {
	var errs []error
	if len(c.Ports) == 0 {
		errs = append(errs, errors.New("--port is required: the app's port (repeat it for several), as in the pod's containerPort"))
	}
	_, lport, err := net.SplitHostPort(c.Listen)
	own := -1
	if err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: want HOST:PORT or :PORT (e.g. %s): %w", c.Listen, DefaultListen, err))
	} else if n, err := strconv.Atoi(lport); err != nil || n < 0 || n > 65535 {
		errs = append(errs, fmt.Errorf("--listen %q: port must be a number 0-65535", c.Listen))
	} else if n > 0 {
		own = n
	}
	seen := map[int]bool{}
	for _, p := range c.Ports {
		switch {
		case p < 1 || p > 65535:
			errs = append(errs, fmt.Errorf("--port %d: must be 1-65535", p))
		case p == own:
			errs = append(errs, fmt.Errorf("--port %d is the sidecar's own --listen port: give the app's port, or move --listen", p))
		case seen[p]:
			errs = append(errs, fmt.Errorf("--port %d given twice", p))
		}
		seen[p] = true
	}
	if c.Interval < time.Millisecond || c.Interval > time.Minute {
		errs = append(errs, fmt.Errorf("--interval (%s) must be between 1ms and 1m", c.Interval))
	}
	if !(c.MaxCPU > 0 && c.MaxCPU <= 1) {
		errs = append(errs, fmt.Errorf("--max-cpu (%g) must be in (0, 1]: a share of one core", c.MaxCPU))
	}
	if c.PodName == "" {
		errs = append(errs, errors.New("--pod-name (or POD_NAME) must not be empty"))
	}
	if c.MaxPeers < 0 {
		errs = append(errs, fmt.Errorf("--max-peers (%d) must not be negative", c.MaxPeers))
	}
	return errors.Join(errs...)
}

// Sidecar polls the namespace's sockets into a Tracker and serves its
// timeline.
type Sidecar struct {
	cfg   Config
	clk   clock.Clock
	dump  Dumper
	po    func() (uint64, error)
	own   atomic.Int64 // the HTTP server's accepts
	ready atomic.Bool  // a dump has succeeded

	pollMu sync.Mutex // one poll at a time; guards buf
	buf    []Socket

	mu sync.Mutex // guards tr
	tr *Tracker
}

// New makes a Sidecar whose own server port is own (0: none, as in tests
// that drive Poll themselves). cfg.Dump must be set or KernelDumper used.
func New(cfg Config, own uint16) *Sidecar {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	po := cfg.PassiveOpens
	if po == nil {
		po = func() (uint64, error) { return ReadPassiveOpens(DefaultSNMPPath) }
	}
	ports := make([]uint16, len(cfg.Ports))
	for i, p := range cfg.Ports {
		ports[i] = uint16(p)
	}
	return &Sidecar{
		cfg: cfg, clk: clk, dump: cfg.Dump, po: po,
		tr: NewTracker(cfg.PodName, clk.Now(), cfg.Interval, ports, own, cfg.MaxPeers),
	}
}

// Poll reads the sockets once and records them. The dump is stamped at its
// return: a connection it lists was accepted before then.
func (s *Sidecar) Poll() {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	d := Dump{Start: s.clk.Now()}
	var err error
	s.buf, d.Interrupted, err = s.dump(s.buf[:0])
	d.End = s.clk.Now()
	d.Sockets, d.Err = s.buf, err
	if err == nil {
		// After the dump: whatever it counts was accepted before the read,
		// and all but the last µs' connections were in the dump.
		d.PassiveOpens, d.PassiveOpensErr = s.po()
		d.OwnAccepts = s.own.Load()
	}
	s.mu.Lock()
	s.tr.Observe(d)
	s.mu.Unlock()
	if err == nil {
		s.ready.Store(true)
	}
}

// nextWait is the time from a poll's end to the next poll: what is left of
// interval after the poll took took, but at least what keeps the polls to
// maxCPU of a core (wall time standing for CPU time, which it bounds).
func nextWait(interval time.Duration, maxCPU float64, took time.Duration) time.Duration {
	wait := interval - took
	if floor := time.Duration(float64(took) * (1/maxCPU - 1)); wait < floor {
		wait = floor
	}
	return max(wait, 0)
}

// lastRead is the last dump's duration.
func (s *Sidecar) lastRead() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.lastRead
}

// Timeline renders the record now.
func (s *Sidecar) Timeline() Timeline {
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.Timeline(now)
}

func (s *Sidecar) sigterm() {
	now := s.clk.Now()
	s.mu.Lock()
	s.tr.Sigterm(now)
	s.mu.Unlock()
}

// Handler serves GET /timeline, /clock (the probe's {"time", "unix_ns"},
// which measure reads for the skew estimate: measure/probeclient.go
// probeClock) and /healthz (200 once a dump has succeeded: a native
// sidecar's startupProbe holds the app back until the baseline is read).
func (s *Sidecar) Handler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	}
	mux.HandleFunc("GET "+probe.PathTimeline, func(w http.ResponseWriter, _ *http.Request) {
		reply(w, s.Timeline())
	})
	mux.HandleFunc("GET "+probe.PathClock, func(w http.ResponseWriter, _ *http.Request) {
		// Stamped as late as it can be.
		reply(w, probe.ClockReplyAt(s.clk.Now()))
	})
	mux.HandleFunc("GET "+probe.PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "no socket dump has succeeded yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// Run listens on cfg.Listen and serves until ctx is done (see Serve).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Dump == nil {
		dump, closeDump, err := KernelDumper()
		if err != nil {
			return err
		}
		defer closeDump()
		cfg.Dump = dump
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (--listen): %w", cfg.Listen, err)
	}
	own := uint16(ln.Addr().(*net.TCPAddr).Port)
	return New(cfg, own).Serve(ctx, ln, log)
}

// Serve polls every cfg.Interval and serves the timeline on ln until ctx is
// done; then it stamps Sigterm, polls once more, writes the termination log
// (a failure is logged, not returned) and closes the server.
func (s *Sidecar) Serve(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			s.own.Add(1)
			return ctx
		},
	}
	log.Info("started", "pod", s.cfg.PodName, "ports", s.cfg.Ports, "interval", s.cfg.Interval.String(), "listen", ln.Addr().String())
	s.Poll()
	if tl := s.Timeline(); tl.Poll.Errors > 0 {
		ln.Close()
		return fmt.Errorf("read the pod's TCP sockets: %s", tl.Poll.LastError)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
		}
		return nil
	})
	g.Go(func() error {
		took := s.lastRead()
		for {
			t := s.clk.NewTimer(nextWait(s.cfg.Interval, s.cfg.MaxCPU, took))
			select {
			case <-gctx.Done():
				t.Stop()
				return nil
			case <-t.C():
			}
			start := s.clk.Now()
			s.Poll()
			took = s.clk.Since(start)
		}
	})
	g.Go(func() error {
		<-gctx.Done()
		s.sigterm()
		s.Poll()
		tl := s.Timeline()
		log.Info("stopping", "accepts", tl.Accepts, "unseen_connections", tl.UnseenConnections, "polls", tl.Poll.Polls)
		if s.cfg.TerminationLog != "" {
			if err := WriteTerminationLog(s.cfg.TerminationLog, tl); err != nil {
				log.Warn("termination log", "err", err)
			}
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}

// TerminationMessage renders tl as JSON within the kubelet's 4096 bytes
// (probe.MaxTerminationMessage), leaving out the least recently active
// peers first; PeersOmitted says how many.
func TerminationMessage(tl Timeline) ([]byte, error) {
	all := tl.Peers
	for n := len(all); n >= 0; n-- {
		t := tl
		t.Peers = all[:n:n]
		if n == 0 {
			t.Peers = nil
		}
		t.PeersOmitted = tl.PeersOmitted + len(all) - n
		b, err := json.Marshal(t)
		if err != nil {
			return nil, fmt.Errorf("encode sidecar timeline: %w", err)
		}
		if len(b) <= probe.MaxTerminationMessage {
			return b, nil
		}
		// About 150 bytes a peer: skip ahead rather than encode 1024 times.
		if over := (len(b) - probe.MaxTerminationMessage) / 200; over > 1 {
			n -= over - 1
		}
	}
	return nil, errors.New("sidecar timeline does not fit the 4096-byte termination message even without peers")
}

// WriteTerminationLog writes tl's termination message to path, the
// container's terminationMessagePath: the kubelet's bind-mounted file is
// writable under a read-only root filesystem.
func WriteTerminationLog(path string, tl Timeline) error {
	b, err := TerminationMessage(tl)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write termination message (--termination-log): %w", err)
	}
	return nil
}
