package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// waitTimeout bounds every wait on the probe's goroutines; generous because
// the test machine's CPU is shared, and never the thing being measured.
const waitTimeout = 20 * time.Second

// syncBuffer is a log sink the test reads while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// inProcess is a probe served by Serve on a loopback port, on a fake clock.
type inProcess struct {
	url     string
	addr    string
	clk     *clocktesting.FakeClock
	sigterm chan struct{}
	cancel  context.CancelFunc
	done    chan error
	termLog string
	logs    *syncBuffer
	client  *http.Client
}

func serveInProcess(t *testing.T, cfg Config) *inProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newInProcess(t, ln.Addr().String(), &cfg)
	cfg.MaxPeers = DefaultMaxPeers
	cfg.Listen = "unused"
	p.start(t, func(ctx context.Context, log *slog.Logger) error { return Serve(ctx, ln, cfg, p.sigterm, log) })
	return p
}

// newInProcess is a probe on addr not yet started; it points cfg's pod
// name (when unset), shutdown timeout, termination log and clock at it.
func newInProcess(t *testing.T, addr string, cfg *Config) *inProcess {
	t.Helper()
	p := &inProcess{
		addr:    addr,
		url:     "http://" + addr,
		clk:     clocktesting.NewFakeClock(t0),
		sigterm: make(chan struct{}),
		done:    make(chan error, 1),
		termLog: filepath.Join(t.TempDir(), "termination-log"),
		logs:    &syncBuffer{},
		client:  &http.Client{Timeout: waitTimeout},
	}
	if cfg.PodName == "" {
		cfg.PodName = "pod-a"
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = waitTimeout
	}
	cfg.TerminationLog = p.termLog
	cfg.Clock = p.clk
	return p
}

// start runs serve in the background until the test ends.
func (p *inProcess) start(t *testing.T, serve func(ctx context.Context, log *slog.Logger) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	log := slog.New(slog.NewJSONHandler(p.logs, nil))
	go func() { p.done <- serve(ctx, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(waitTimeout):
			t.Errorf("the probe did not return after cancel; logs:\n%s", p.logs)
		}
	})
}

func (p *inProcess) do(t *testing.T, method, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, p.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func (p *inProcess) expect(t *testing.T, method, path string, code int) string {
	t.Helper()
	resp, body := p.do(t, method, path)
	if resp.StatusCode != code {
		t.Fatalf("%s %s = %d %q, want %d", method, path, resp.StatusCode, body, code)
	}
	return body
}

// waitFor polls cond until it holds; it waits on the server's goroutines,
// whose progress the test cannot receive on a channel.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (p *inProcess) waitDone(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("Serve = %v", err)
		}
		p.done <- nil // for Cleanup
	case <-time.After(waitTimeout):
		t.Fatalf("Serve did not return; logs:\n%s", p.logs)
	}
}

func (p *inProcess) running() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return false
	default:
		return true
	}
}

func (p *inProcess) termination(t *testing.T) Timeline {
	t.Helper()
	b, err := os.ReadFile(p.termLog)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := ParseTimeline(b)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func TestServeResponses(t *testing.T) {
	const off = 90 * time.Minute
	p := serveInProcess(t, Config{Hold: time.Minute, ClockOffset: off, PodName: "pod-a"})
	wantNS := t0.Add(off).UnixNano()

	// Traffic: the name and the clock in the body, and no header of the
	// probe's own (replyTraffic).
	resp, body := p.do(t, http.MethodGet, "/any/path?x=1")
	want := "pod=pod-a time=" + strconv.FormatInt(wantNS, 10) + "\n"
	if resp.StatusCode != http.StatusOK || body != want {
		t.Errorf("GET /any/path = %d %q, want 200 %q (the fake clock plus the offset)", resp.StatusCode, body, want)
	}
	if pod, ns, ok := ParseTrafficBody([]byte(body)); !ok || string(pod) != "pod-a" || ns != wantNS {
		t.Errorf("ParseTrafficBody(%q) = %q, %d, %t", body, pod, ns, ok)
	}
	if got := resp.Header.Get(HeaderPod) + resp.Header.Get(HeaderTime); got != "" {
		t.Errorf("traffic reply carries the probe's headers (%q): net/http then copies the header map", got)
	}
	// The probe's own endpoints keep the headers (the health check below
	// is one).
	resp, _ = p.do(t, http.MethodGet, PathHealthz)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s = %d", PathHealthz, resp.StatusCode)
	}
	if got := resp.Header.Get(HeaderPod); got != "pod-a" {
		t.Errorf("%s on %s = %q", HeaderPod, PathHealthz, got)
	}
	if got := resp.Header.Get(HeaderTime); got != strconv.FormatInt(wantNS, 10) {
		t.Errorf("%s on %s = %s, want the fake clock plus the offset, %d", HeaderTime, PathHealthz, got, wantNS)
	}

	var clk struct {
		Time   time.Time `json:"time"`
		UnixNS int64     `json:"unix_ns"`
	}
	if err := json.Unmarshal([]byte(p.expect(t, http.MethodGet, PathClock, 200)), &clk); err != nil {
		t.Fatal(err)
	}
	if clk.UnixNS != wantNS || !clk.Time.Equal(t0.Add(off)) {
		t.Errorf("/clock = %+v, want %s", clk, t0.Add(off))
	}

	resp, _ = p.do(t, http.MethodGet, PathRelease)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("GET /release = %d Allow %q, want 405 Allow POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
	p.expect(t, http.MethodPost, PathTimeline, http.StatusMethodNotAllowed)
	p.expect(t, http.MethodGet, PathPrestop+"?sleep=soon", http.StatusBadRequest)

	tl, err := ParseTimeline([]byte(p.expect(t, http.MethodGet, PathTimeline, 200)))
	if err != nil {
		t.Fatal(err)
	}
	eqInt(t, "Requests", tl.Requests, 7)
	eqInt(t, "TrafficRequests", tl.TrafficRequests, 1)
	eqInt(t, "TrafficAccepts", tl.TrafficAccepts, 1)
	eqTime(t, "PrestopCalled (even with a bad sleep)", tl.PrestopCalled, ptr(t0.Add(off)))
	if len(tl.Peers) != 1 || tl.Peers[0].Addr != "127.0.0.1" {
		t.Errorf("Peers = %+v, want one, 127.0.0.1", tl.Peers)
	}

	// Cancelling the context (a second signal) stops at once, and the
	// termination message is still written.
	p.cancel()
	p.waitDone(t)
	tl = p.termination(t)
	eqTime(t, "Sigterm", tl.Sigterm, nil)
	eqTime(t, "Exit", tl.Exit, ptr(t0.Add(off)))
	eqInt(t, "Requests", tl.Requests, 7)
}

func TestServeHoldUntilRelease(t *testing.T) {
	p := serveInProcess(t, Config{Hold: time.Hour})
	p.expect(t, http.MethodGet, "/", 200)
	p.expect(t, http.MethodGet, PathHealthz, 200)

	p.clk.SetTime(at(time.Second))
	close(p.sigterm)
	// The hold timer exists once SIGTERM is handled.
	waitFor(t, "the hold timer", p.clk.HasWaiters)
	p.expect(t, http.MethodGet, PathHealthz, http.StatusServiceUnavailable)

	// New connections are still accepted and served.
	p.client.CloseIdleConnections()
	p.clk.SetTime(at(2 * time.Second))
	if body := p.expect(t, http.MethodGet, "/after", 200); !strings.HasPrefix(body, "pod=pod-a time=") {
		t.Errorf("body = %q", body)
	}
	if !p.running() {
		t.Fatal("Serve returned during the hold")
	}

	p.clk.SetTime(at(3 * time.Second))
	p.expect(t, http.MethodPost, PathRelease, 200)
	p.waitDone(t)

	tl := p.termination(t)
	eqTime(t, "Sigterm", tl.Sigterm, ptr(at(time.Second)))
	eqTime(t, "Released", tl.Released, ptr(at(3*time.Second)))
	eqTime(t, "HoldExpired", tl.HoldExpired, nil)
	eqTime(t, "Exit", tl.Exit, ptr(at(3*time.Second)))
	eqTime(t, "LastTrafficAccept", tl.LastTrafficAccept, ptr(at(2*time.Second)))
	eqInt(t, "TrafficAcceptsAfterSigterm", tl.TrafficAcceptsAfterSigterm, 1)
	eqInt(t, "TrafficRequestsAfterSigterm", tl.TrafficRequestsAfterSigterm, 1)
	eqInt(t, "RequestsAfterSigterm", tl.RequestsAfterSigterm, 3)
	for _, msg := range []string{`"msg":"started"`, `"msg":"sigterm"`, `"msg":"released"`, `"msg":"exit"`} {
		if !strings.Contains(p.logs.String(), msg) {
			t.Errorf("log lacks %s:\n%s", msg, p.logs)
		}
	}
}

func TestServeHoldExpires(t *testing.T) {
	p := serveInProcess(t, Config{Hold: 30 * time.Second})
	close(p.sigterm)
	waitFor(t, "the hold timer", p.clk.HasWaiters)
	p.clk.Step(30*time.Second - 1)
	if !p.running() {
		t.Fatal("Serve returned before the hold expired")
	}
	p.clk.Step(1)
	p.waitDone(t)

	tl := p.termination(t)
	eqTime(t, "Sigterm", tl.Sigterm, ptr(t0))
	eqTime(t, "HoldExpired", tl.HoldExpired, ptr(at(30*time.Second)))
	eqTime(t, "Released", tl.Released, nil)
	if !strings.Contains(p.logs.String(), `"msg":"hold expired"`) {
		t.Errorf("no hold expired log:\n%s", p.logs)
	}
}

func TestServeReadyAfterSigterm(t *testing.T) {
	p := serveInProcess(t, Config{Hold: time.Hour, ReadyAfterSigterm: true})
	close(p.sigterm)
	waitFor(t, "the hold timer", p.clk.HasWaiters)
	p.expect(t, http.MethodGet, PathHealthz, 200)
	p.expect(t, http.MethodPost, PathRelease, 200)
	p.waitDone(t)
}

func TestServeReleaseBeforeSigterm(t *testing.T) {
	p := serveInProcess(t, Config{Hold: time.Hour})
	p.expect(t, http.MethodPost, PathRelease, 200)
	p.clk.SetTime(at(time.Second))
	close(p.sigterm)
	p.waitDone(t) // without any step of the clock: the hold is already over
	tl := p.termination(t)
	eqTime(t, "Released", tl.Released, ptr(t0))
	eqTime(t, "Sigterm", tl.Sigterm, ptr(at(time.Second)))
}

func TestServePrestopSleep(t *testing.T) {
	p := serveInProcess(t, Config{Hold: time.Hour})
	p.clk.SetTime(at(time.Second))
	got := make(chan int, 1)
	go func() {
		resp, err := p.client.Get(p.url + PathPrestop + "?sleep=5s")
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	waitFor(t, "the preStop sleep", p.clk.HasWaiters)
	p.clk.Step(5*time.Second - 1)
	select {
	case code := <-got:
		t.Fatalf("preStop answered %d before its sleep was over", code)
	default:
	}
	p.clk.Step(1)
	select {
	case code := <-got:
		if code != 200 {
			t.Fatalf("preStop = %d", code)
		}
	case <-time.After(waitTimeout):
		t.Fatal("preStop did not answer after its sleep")
	}
	p.expect(t, http.MethodGet, PathPrestop, 200) // a second call, no sleep

	tl, err := ParseTimeline([]byte(p.expect(t, http.MethodGet, PathTimeline, 200)))
	if err != nil {
		t.Fatal(err)
	}
	eqTime(t, "PrestopCalled", tl.PrestopCalled, ptr(at(time.Second)))
	eqInt(t, "PrestopCalls", tl.PrestopCalls, 2)
	eqInt(t, "TrafficRequests", tl.TrafficRequests, 0)
}

func TestServeExitOnSigterm(t *testing.T) {
	p := serveInProcess(t, Config{Hold: time.Hour, ExitOnSigterm: true})
	// An in-flight request (a sleeping preStop) must finish in the drain.
	got := make(chan int, 1)
	go func() {
		resp, err := p.client.Get(p.url + PathPrestop + "?sleep=5s")
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	waitFor(t, "the preStop sleep", p.clk.HasWaiters)

	close(p.sigterm)
	waitFor(t, "the sigterm log", func() bool { return strings.Contains(p.logs.String(), `"msg":"sigterm"`) })
	_, err := net.DialTimeout("tcp", p.addr, waitTimeout)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after SIGTERM: err = %v, want connection refused", err)
	}
	if !p.running() {
		t.Fatal("Serve returned with a request in flight")
	}
	p.clk.Step(5 * time.Second)
	if code := <-got; code != 200 {
		t.Errorf("in-flight request = %d, want 200", code)
	}
	p.waitDone(t)
	tl := p.termination(t)
	eqTime(t, "Sigterm", tl.Sigterm, ptr(t0))
	eqTime(t, "Released", tl.Released, nil)
	eqTime(t, "HoldExpired", tl.HoldExpired, nil)
	eqTime(t, "Exit", tl.Exit, ptr(at(5*time.Second)))
}

// --refuse-on-sigterm: refused from SIGTERM on, yet the process stays
// until the hold ends, and only then exits.
func TestServeRefuseOnSigterm(t *testing.T) {
	p := serveInProcess(t, Config{Hold: 5 * time.Second, RefuseOnSigterm: true})
	close(p.sigterm)
	waitFor(t, "the sigterm log", func() bool { return strings.Contains(p.logs.String(), `"msg":"sigterm"`) })
	_, err := net.DialTimeout("tcp", p.addr, waitTimeout)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after SIGTERM: err = %v, want connection refused", err)
	}
	waitFor(t, "the hold timer", p.clk.HasWaiters)
	if !p.running() {
		t.Fatal("exited before the hold ended")
	}
	p.clk.Step(5 * time.Second)
	p.waitDone(t)
	tl := p.termination(t)
	eqTime(t, "Sigterm", tl.Sigterm, ptr(t0))
	eqTime(t, "HoldExpired", tl.HoldExpired, ptr(at(5*time.Second)))
	eqTime(t, "Exit", tl.Exit, ptr(at(5*time.Second)))
}

// --refuse-on-sigterm stops serving an open keep-alive connection too, as
// an app that exits or drains with http.Server.Shutdown does: a data plane
// that pools its upstream connections (Traefik) must meet the refusal, not
// a connection that goes on answering.
func TestServeRefuseOnSigtermClosesKeepAlive(t *testing.T) {
	p := serveInProcess(t, Config{Hold: 5 * time.Second, RefuseOnSigterm: true})
	rc := dialProbe(t, p.addr)
	rc.expect(t, http.MethodGet, "/", 200) // the connection is now idle, kept alive
	close(p.sigterm)
	waitFor(t, "the sigterm log", func() bool { return strings.Contains(p.logs.String(), `"msg":"sigterm"`) })
	if err := rc.c.SetReadDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.br.ReadByte(); err != io.EOF {
		t.Fatalf("read on the kept-alive connection after SIGTERM: %v (byte %q), want EOF: the probe closed it", err, n)
	}
	if !p.running() {
		t.Fatal("exited before the hold ended")
	}
	p.clk.Step(5 * time.Second)
	p.waitDone(t)
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Listen: ":8080", PodName: "p", Hold: time.Minute, MaxPeers: 1, ShutdownTimeout: time.Second}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		flag string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"zero hold", func(c *Config) { c.Hold = 0 }, ""},
		{"zero peers", func(c *Config) { c.MaxPeers = 0 }, ""},
		{"negative offset", func(c *Config) { c.ClockOffset = -time.Hour }, ""},
		{"no listen", func(c *Config) { c.Listen = "" }, "--listen"},
		{"no pod", func(c *Config) { c.PodName = "" }, "--pod-name"},
		{"listen delay", func(c *Config) { c.ListenDelay = 3 * time.Second }, ""},
		{"negative listen delay", func(c *Config) { c.ListenDelay = -time.Second }, "--listen-delay"},
		{"negative hold", func(c *Config) { c.Hold = -time.Second }, "--hold"},
		{"negative peers", func(c *Config) { c.MaxPeers = -1 }, "--max-peers"},
		{"zero shutdown", func(c *Config) { c.ShutdownTimeout = 0 }, "--shutdown-timeout"},
		{"ignore and exit on sigterm", func(c *Config) { c.IgnoreSigterm, c.ExitOnSigterm = true, true }, "--ignore-sigterm"},
		{"refuse and exit on sigterm", func(c *Config) { c.RefuseOnSigterm, c.ExitOnSigterm = true, true }, "--refuse-on-sigterm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.flag == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.flag != "" && (err == nil || !strings.Contains(err.Error(), tc.flag)):
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.flag)
			}
		})
	}
}

// delayedProbe is a probe served by serve on a fake clock, whose listener is
// opened on addr only when serve asks for it (after cfg.ListenDelay).
type delayedProbe struct {
	*inProcess
	opened chan struct{}
}

func serveDelayed(t *testing.T, cfg Config) *delayedProbe {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg.PodName = "pod-late"
	p := &delayedProbe{inProcess: newInProcess(t, addr, &cfg), opened: make(chan struct{})}
	cfg.Listen = addr
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	listen := func(context.Context) (net.Listener, error) {
		defer close(p.opened)
		return net.Listen("tcp", addr)
	}
	p.start(t, func(ctx context.Context, log *slog.Logger) error { return serve(ctx, listen, cfg, p.sigterm, log) })
	return p
}

func TestServeListenDelay(t *testing.T) {
	p := serveDelayed(t, Config{Hold: time.Hour, ListenDelay: 3 * time.Second})
	waitFor(t, "the listen-delay timer", p.clk.HasWaiters)

	// Not listening yet: the readiness probe's /healthz is refused like
	// traffic, so a readiness probe keeps the pod out of the Service.
	if _, err := net.DialTimeout("tcp", p.addr, waitTimeout); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial during the delay: %v, want connection refused", err)
	}
	p.clk.Step(3*time.Second - 1)
	select {
	case <-p.opened:
		t.Fatal("listener opened before --listen-delay had passed")
	default:
	}
	p.clk.Step(1)
	select {
	case <-p.opened:
	case <-time.After(waitTimeout):
		t.Fatal("listener not opened after --listen-delay")
	}
	waitFor(t, "the started log line", func() bool { return strings.Contains(p.logs.String(), `"msg":"started"`) })
	p.expect(t, http.MethodGet, PathHealthz, 200)
	p.clk.Step(time.Second)
	p.expect(t, http.MethodGet, "/", 200)

	tl, err := ParseTimeline([]byte(p.expect(t, http.MethodGet, PathTimeline, 200)))
	if err != nil {
		t.Fatal(err)
	}
	eqTime(t, "Started", &tl.Started, ptr(t0))
	eqTime(t, "ListenerOpen", tl.ListenerOpen, ptr(at(3*time.Second)))
	eqTime(t, "FirstTrafficRequest", tl.FirstTrafficRequest, ptr(at(4*time.Second)))
}

func TestServeSigtermDuringListenDelay(t *testing.T) {
	p := serveDelayed(t, Config{Hold: time.Hour, ListenDelay: 3 * time.Second})
	waitFor(t, "the listen-delay timer", p.clk.HasWaiters)
	p.clk.Step(time.Second)
	close(p.sigterm)
	// Nothing to hold open: the probe ends without ever listening.
	p.waitDone(t)
	select {
	case <-p.opened:
		t.Error("listener opened after SIGTERM during the delay")
	default:
	}
	tl := p.termination(t)
	eqTime(t, "Sigterm", tl.Sigterm, ptr(at(time.Second)))
	eqTime(t, "ListenerOpen", tl.ListenerOpen, nil)
	eqTime(t, "Exit", tl.Exit, ptr(at(time.Second)))
	if !strings.Contains(p.logs.String(), "sigterm before listening") {
		t.Errorf("exit reason not logged:\n%s", p.logs)
	}
}
