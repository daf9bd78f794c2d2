package load

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestRunnerConfigValidate(t *testing.T) {
	ok := RunnerConfig{Load: Config{URL: "http://10.96.0.10:8080/", Rate: 100}, StatsListen: ":9090", Deadline: t0.Add(time.Hour)}
	if err := ok.Validate(t0); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tt := range []struct {
		name string
		mod  func(*RunnerConfig)
		want string
	}{
		{"rate 0", func(c *RunnerConfig) { c.Load.Rate = 0 }, "--rate (0)"},
		{"rate negative", func(c *RunnerConfig) { c.Load.Rate = -5 }, "--rate (-5)"},
		{"rate above the cap", func(c *RunnerConfig) { c.Load.Rate = MaxRate + 1 }, "--rate (5001) must be at most 5000"},
		{"no url", func(c *RunnerConfig) { c.Load.URL = "" }, "--url"},
		{"no listen", func(c *RunnerConfig) { c.StatsListen = "" }, "--stats-listen"},
		{"bad listen", func(c *RunnerConfig) { c.StatsListen = "9090" }, "--stats-listen"},
		{"no deadline", func(c *RunnerConfig) { c.Deadline = time.Time{} }, "--deadline is required"},
		{"deadline passed", func(c *RunnerConfig) { c.Deadline = t0 }, "has passed"},
		{"deadline too far", func(c *RunnerConfig) { c.Deadline = t0.Add(MaxLifetime + time.Second) }, "more than 24h0m0s ahead"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			if err := c.Validate(t0); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseDeadline(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"2026-11-29T13:00:00Z", t0.Add(time.Hour), false},
		{"2026-11-29T12:00:00.5Z", t0.Add(500 * time.Millisecond), false},
		{"30m", t0.Add(30 * time.Minute), false},
		{"0s", time.Time{}, true},
		{"-1m", time.Time{}, true},
		{"tomorrow", time.Time{}, true},
	} {
		got, err := ParseDeadline(tt.in, t0)
		if (err != nil) != tt.err || !got.Equal(tt.want) {
			t.Errorf("ParseDeadline(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !strings.Contains(err.Error(), "--deadline") {
			t.Errorf("ParseDeadline(%q) error %q does not name --deadline", tt.in, err)
		}
	}
}

// fakeProbe answers like the probe: its pod name and its clock (the fake
// clock plus offset), and 502 for every request whose number fail says.
func fakeProbe(t *testing.T, clk *clocktesting.FakeClock, offset time.Duration, fail func(n int64) bool) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail(n.Add(1)) {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set(HeaderPod, "probe-a")
		w.Header().Set(HeaderTime, strconv.FormatInt(clk.Now().Add(offset).UnixNano(), 10))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// GET /stats reports per pod the last response and the skew against the
// probe on the runner's clock, failures by kind, and the runner's own
// clock; GET /clock reads like the probe's.
func TestStatsHandler(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv, _ := fakeProbe(t, clk, 40*time.Millisecond, func(n int64) bool { return n == 2 })
	cfg := RunnerConfig{Load: Config{URL: srv.URL, Rate: 10}, StatsListen: ":0", Deadline: t0.Add(time.Hour), Pod: "runner-a", Node: "node-1"}
	g, err := New(cfg.Load, clk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		clk.SetTime(t0.Add(time.Duration(i) * time.Second))
		g.hit(context.Background(), clk.Now())
	}
	clk.SetTime(t0.Add(5 * time.Second))
	h := StatsHandler(g, nil, cfg, clk)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathStats, nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /stats: %d %s", rec.Code, rec.Header())
	}
	s, err := ParseStats(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !s.Now.Equal(t0.Add(5*time.Second)) || s.Pod != "runner-a" || s.Node != "node-1" || s.Target != srv.URL || !s.Deadline.Equal(cfg.Deadline) {
		t.Errorf("stats header %+v", s)
	}
	if s.Failures["status_502"] != 1 || s.OK != 2 || s.Failed != 1 {
		t.Errorf("failures %v ok %d failed %d; want one status_502 and 2 ok", s.Failures, s.OK, s.Failed)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("pods %+v", s.Pods)
	}
	ps := s.Pods[0].PodStats()
	// The fake clock stands still during each exchange: a zero round trip,
	// so the offset is exact.
	if ps.Pod != "probe-a" || ps.Responses != 2 || !ps.Last.Equal(t0.Add(2*time.Second)) ||
		ps.Skew.Offset != 40*time.Millisecond || ps.Skew.Samples != 2 {
		t.Errorf("pod stats %+v", ps)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathClock, nil))
	var c struct {
		UnixNS int64 `json:"unix_ns"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil || c.UnixNS != t0.Add(5*time.Second).UnixNano() {
		t.Errorf("GET /clock: %s (%v)", rec.Body, err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, PathStats, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /stats: %d, want 405", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /: %d, want 404", rec.Code)
	}
}

func TestParseStatsRefusesNewer(t *testing.T) {
	if _, err := ParseStats([]byte(`{"version": 2}`)); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("ParseStats(version 2) = %v", err)
	}
	if _, err := ParseStats([]byte(`not json`)); err == nil {
		t.Error("ParseStats(garbage) = nil")
	}
}

// The runner stops sending by itself when its deadline, a duration on its
// own clock, passes with no one telling it; then it idles: it sends nothing
// more, /stats still serves (saying since when it is idle), /healthz
// answers 503, and it does not return (an exit would restart its pod)
// until its context ends, and then returns nil. Its clock is 3 h off any
// tool's: a duration cannot be moved by skew.
func TestRunRunnerIdlesAfterDeadline(t *testing.T) {
	start := t0.Add(3 * time.Hour)
	clk := clocktesting.NewFakeClock(start)
	srv, hits := fakeProbe(t, clk, 0, func(int64) bool { return false })
	deadline, err := ParseDeadline("10s", clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	idleAt := make(chan time.Time, 1)
	cfg := RunnerConfig{Load: Config{URL: srv.URL, Rate: 100}, StatsListen: "127.0.0.1:0", Deadline: deadline,
		OnIdle: func(at time.Time) { idleAt <- at }}
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- RunRunner(ctx, cfg, clk, func(a net.Addr) { addr <- a }) }()
	var a net.Addr
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("RunRunner returned before it was ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("runner not ready after 10 s")
	}
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := http.Get("http://" + a.String() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	eventually(t, "the first request", func() bool { return hits.Load() >= 1 })
	if code, body := get(PathStats); code != 200 {
		t.Fatalf("stats while running: %d %s", code, body)
	} else if s, err := ParseStats(body); err != nil || s.Sent < 1 || !s.IdleSince.IsZero() {
		t.Errorf("stats while running: %s (%v)", body, err)
	}
	if code, _ := get(PathHealthz); code != 200 {
		t.Errorf("healthz while running: %d", code)
	}

	clk.SetTime(start.Add(10*time.Second + time.Millisecond))
	select {
	case at := <-idleAt:
		if at.Before(deadline) {
			t.Errorf("idle at %s, before the deadline %s", at, deadline)
		}
	case err := <-done:
		t.Fatalf("RunRunner returned at its deadline (%v): want it idle", err)
	case <-time.After(10 * time.Second):
		t.Fatal("runner not idle 10 s after its deadline passed")
	}
	sent := hits.Load()
	clk.SetTime(start.Add(time.Minute)) // fires any pacing timer left
	if hits.Load() != sent {
		t.Errorf("%d requests after the deadline", hits.Load()-sent)
	}
	code, body := get(PathStats)
	s, err := ParseStats(body)
	if code != 200 || err != nil || s.IdleSince.IsZero() || s.Sent != sent {
		t.Errorf("stats when idle: %d %s (%v): want idle_since and the %d requests sent", code, body, err, sent)
	}
	if code, body := get(PathHealthz); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "idle") {
		t.Errorf("healthz when idle: %d %s, want 503 saying idle", code, body)
	}
	select {
	case err := <-done:
		t.Fatalf("RunRunner returned while idle: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunRunner when stopped = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunRunner still running 10 s after its context ended")
	}
}

// A runner refuses to start on a bad rate, before it sends or listens.
func TestRunRunnerRefusesRate(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	for _, rate := range []float64{0, -1, MaxRate * 2} {
		cfg := RunnerConfig{Load: Config{URL: "http://127.0.0.1:1/", Rate: rate}, StatsListen: "127.0.0.1:0", Deadline: t0.Add(time.Minute)}
		if err := RunRunner(context.Background(), cfg, clk, nil); err == nil || !strings.Contains(err.Error(), "--rate") {
			t.Errorf("rate %v: %v, want an error naming --rate", rate, err)
		}
	}
}

// /stats serves the stream log from a cursor (streams_since): the events
// after it and the next cursor, and says when and how much the capped log
// dropped, so a reader polling every second moves only what is new and
// knows from when the log is incomplete.
func TestStatsStreamsSince(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	g, err := New(Config{URL: "http://probe.test/", Rate: 10}, clk)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewStreamHolder(StreamConfig{URL: "http://probe.test/", Protocol: ProtocolWebSocket, Streams: 1, MaxEvents: 4}, clk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		h.log(&StreamEvent{Slot: i, Kind: EventOpen, At: t0.Add(time.Duration(i) * time.Second)})
	}
	handler := StatsHandler(g, h, RunnerConfig{Load: Config{URL: "http://probe.test/"}}, clk)
	get := func(query string) Stats {
		t.Helper()
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathStats+query, nil))
		s, err := ParseStats(rec.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		query       string
		since, next int64
		slots       []int
	}{
		{"", 0, 4, []int{0, 1, 2, 3}},
		{"?" + QueryStreamsSince + "=0", 0, 4, []int{0, 1, 2, 3}},
		{"?" + QueryStreamsSince + "=3", 3, 4, []int{3}},
		{"?" + QueryStreamsSince + "=4", 4, 4, nil},
		// Past the end (a reader of a restarted runner): clamped, so the
		// reader sees the cursor it asked for was not honoured.
		{"?" + QueryStreamsSince + "=9", 4, 4, nil},
	} {
		s := get(tc.query)
		var slots []int
		for _, e := range s.Streams {
			slots = append(slots, e.Slot)
		}
		if s.StreamsSince != tc.since || s.StreamsNext != tc.next || !slices.Equal(slots, tc.slots) {
			t.Errorf("%q: since %d next %d slots %v; want %d, %d, %v", tc.query, s.StreamsSince, s.StreamsNext, slots, tc.since, tc.next, tc.slots)
		}
		if s.StreamsDropped != 2 || !s.StreamsFirstDropped.Equal(t0.Add(4*time.Second)) {
			t.Errorf("%q: dropped %d from %v; want 2 from the 5th event (4s)", tc.query, s.StreamsDropped, s.StreamsFirstDropped)
		}
	}
	if n, first := h.Dropped(); n != 2 || !first.Equal(t0.Add(4*time.Second)) {
		t.Errorf("Dropped() = %d, %v; want 2 from 4s", n, first)
	}
}
