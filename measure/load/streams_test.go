package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/probe"
)

func TestParseReconnect(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Reconnect
		err  bool
	}{
		{in: "grpc-default", want: Reconnect{Policy: ReconnectGRPCDefault}},
		{in: "immediate", want: Reconnect{Policy: ReconnectImmediate}},
		{in: "500ms±200ms", want: Reconnect{Policy: "fixed", Delay: 500 * time.Millisecond, Jitter: 200 * time.Millisecond}},
		{in: "1s+-1s", want: Reconnect{Policy: "fixed", Delay: time.Second, Jitter: time.Second}},
		{in: "2s", want: Reconnect{Policy: "fixed", Delay: 2 * time.Second}},
		{in: "1s±2s", err: true},
		{in: "-1s", err: true},
		{in: "soon", err: true},
		{in: "", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseReconnect(tc.in)
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), "--reconnect") {
					t.Fatalf("ParseReconnect(%q) = %v, %v; want an error naming --reconnect", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseReconnect(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestReconnectWaitGRPCDefault checks the policy against grpc-go's
// numbers: immediate after a working stream, then 1 s, 1.6 s, 2.56 s, ...
// ±20 %, capped at 120 s (internal/backoff/backoff.go, clientconn.go).
func TestReconnectWaitGRPCDefault(t *testing.T) {
	r := Reconnect{Policy: ReconnectGRPCDefault}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tc := range []struct {
		failures int
		u        float64
		want     time.Duration
	}{
		{0, 0.9, 0},
		{1, 0.0, time.Second}, // BaseDelay exactly, no jitter
		{1, 0.99, time.Second},
		{2, 0.5, ms(1600)},
		{2, 0.0, ms(1600 * 0.8)},
		{3, 0.5, ms(2560)},
		{3, 1.0, ms(2560 * 1.2)},
		{20, 0.5, 120 * time.Second},
		{20, 0.0, 96 * time.Second},
	} {
		got := r.Wait(tc.failures, tc.u)
		if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("Wait(%d, %v) = %s, want %s", tc.failures, tc.u, got, tc.want)
		}
	}
	fixed := Reconnect{Policy: "fixed", Delay: 500 * time.Millisecond, Jitter: 200 * time.Millisecond}
	if lo, hi := fixed.Wait(0, 0), fixed.Wait(5, 1); lo != 300*time.Millisecond || hi != 700*time.Millisecond {
		t.Errorf("500ms±200ms waits from %s to %s, want 300ms to 700ms", lo, hi)
	}
	if w := (Reconnect{Policy: ReconnectImmediate}).Wait(7, 0.5); w != 0 {
		t.Errorf("immediate waits %s", w)
	}
}

// probeOnLoopback runs a real probe on a loopback port with the stream
// drain given; sigterm starts its termination, release ends its hold.
type loopbackProbe struct {
	url     string
	sigterm chan struct{}
	done    chan error
}

func serveProbe(t *testing.T, drain probe.StreamDrain, hold time.Duration) *loopbackProbe {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &loopbackProbe{url: "http://" + ln.Addr().String() + "/", sigterm: make(chan struct{}), done: make(chan error, 1)}
	cfg := probe.Config{Listen: "unused", PodName: "pod-a", Hold: hold, ShutdownTimeout: 5 * time.Second,
		TerminationLog: filepath.Join(t.TempDir(), "tl"), StreamDrain: drain, StreamInterval: 20 * time.Millisecond,
		MaxStreamRecords: probe.DefaultMaxStreamRecords}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { p.done <- probe.Serve(ctx, ln, cfg, p.sigterm, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

func holdStreams(t *testing.T, cfg StreamConfig) (*StreamHolder, context.CancelFunc) {
	t.Helper()
	h, err := NewStreamHolder(cfg, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for h.Open() < int64(cfg.Streams) || h.Messages() < int64(cfg.Streams) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d streams open", h.Open(), cfg.Streams)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return h, cancel
}

// waitEvents polls the holder's log until cond holds.
func waitEvents(t *testing.T, h *StreamHolder, what string, cond func([]StreamEvent) bool) []StreamEvent {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ev, _ := h.Events()
		if cond(ev) {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; events: %+v", what, ev)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func count(ev []StreamEvent, kind string) int {
	n := 0
	for _, e := range ev {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func TestStreamHolderGracefulCloseAndReconnect(t *testing.T) {
	const streams = 4
	const wait = 150 * time.Millisecond
	for _, tc := range []struct {
		proto string
		how   string
		code  int
	}{
		{ProtocolWebSocket, CloseWS, probe.CodeServiceRestart},
		{ProtocolGRPC, CloseGRPCStatus, 0},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			p := serveProbe(t, probe.StreamDrain{Mode: probe.DrainClose}, time.Minute)
			h, _ := holdStreams(t, StreamConfig{URL: p.url, Protocol: tc.proto, Streams: streams,
				Reconnect: Reconnect{Policy: "fixed", Delay: wait}})
			close(p.sigterm)
			// Each closed slot re-opens after the wait; the draining probe
			// closes the new stream at once, so opens and closes alternate.
			ev := waitEvents(t, h, "a re-open of every slot", func(ev []StreamEvent) bool { return count(ev, EventOpen) >= 2*streams })
			closedAt := map[int]time.Time{}
			for _, e := range ev {
				switch e.Kind {
				case EventOpen:
					if e.Pod != "pod-a" {
						t.Errorf("open %+v: want pod-a", e)
					}
					if c, ok := closedAt[e.Slot]; ok && e.At.Sub(c) < wait {
						t.Errorf("slot %d re-opened %s after its close, want ≥ %s", e.Slot, e.At.Sub(c), wait)
					}
				case EventClose:
					if e.How != tc.how || e.Code != tc.code || !Graceful(e.How) {
						t.Errorf("close %+v: want %s code %d", e, tc.how, tc.code)
					}
					closedAt[e.Slot] = e.At
				case EventFail:
					t.Errorf("failure %+v: the probe keeps listening in its hold", e)
				}
			}
			checkStreamIDs(t, p, ev)
		})
	}
}

// checkStreamIDs: each open has an id of its own, its close carries it,
// and the probe recorded each stream under that id.
func checkStreamIDs(t *testing.T, p *loopbackProbe, ev []StreamEvent) {
	t.Helper()
	opened := map[string]int{}
	for _, e := range ev {
		switch e.Kind {
		case EventOpen:
			if _, dup := opened[e.Stream]; dup || e.Stream == "" {
				t.Errorf("open %+v: want a stream id of its own", e)
			}
			opened[e.Stream] = e.Slot
		case EventClose:
			if slot, ok := opened[e.Stream]; !ok || slot != e.Slot {
				t.Errorf("close %+v: want the id of its slot's open", e)
			}
		}
	}
	// The client counts a WebSocket open at the 101; the probe registers the
	// stream just after it wrote the 101 (probe/streams.go serveWebSocket:
	// websocket.Accept, then begin), so the last open can be a few
	// microseconds ahead of the probe's record: read the timeline until it
	// holds every stream or a deadline passes.
	deadline := time.Now().Add(5 * time.Second)
	for {
		tl := probeTimeline(t, p)
		recorded := map[string]bool{}
		for _, r := range tl.Streams.Records {
			recorded[r.Client] = true
		}
		var missing []string
		for id := range opened {
			if !recorded[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("streams %v: the probe has no record of them (records %d)", missing, len(tl.Streams.Records))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func probeTimeline(t *testing.T, p *loopbackProbe) probe.Timeline {
	t.Helper()
	resp, err := http.Get(p.url + strings.TrimPrefix(probe.PathTimeline, "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tl probe.Timeline
	if err := json.NewDecoder(resp.Body).Decode(&tl); err != nil || tl.Streams == nil {
		t.Fatalf("probe timeline: %v", err)
	}
	return tl
}

func TestStreamHolderAbruptEndAndRefused(t *testing.T) {
	const streams = 3
	for _, tc := range []struct {
		proto string
		code  int
	}{
		{ProtocolWebSocket, -1},
		{ProtocolGRPC, 14}, // UNAVAILABLE
	} {
		t.Run(tc.proto, func(t *testing.T) {
			// Hold 0: the probe exits at SIGTERM and resets its streams
			// (--stream-drain none), then nothing listens.
			p := serveProbe(t, probe.StreamDrain{Mode: probe.DrainNone}, 0)
			h, _ := holdStreams(t, StreamConfig{URL: p.url, Protocol: tc.proto, Streams: streams,
				Reconnect: Reconnect{Policy: "fixed", Delay: 20 * time.Millisecond}})
			close(p.sigterm)
			ev := waitEvents(t, h, "a refused re-open of every slot", func(ev []StreamEvent) bool { return count(ev, EventFail) >= streams })
			for _, e := range ev {
				switch e.Kind {
				case EventClose:
					if Graceful(e.How) || (e.How != CloseEOF && e.How != CloseReset) || e.Code != tc.code {
						t.Errorf("close %+v: want an abrupt end (eof or reset), code %d", e, tc.code)
					}
				case EventFail:
					if e.How != KindRefused {
						t.Errorf("failure %+v: want refused", e)
					}
				}
			}
			if n := count(ev, EventClose); n != streams {
				t.Errorf("%d closes, want %d", n, streams)
			}
		})
	}
}

// TestStreamHolderHandshakeStatus checks that an intermediary's 502 during
// the handshake is a failure of kind status_502 for both protocols (a
// server speaking HTTP/1.1 and h2c, as an ingress with no backend does).
func TestStreamHolderHandshakeStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no backend", http.StatusBadGateway)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	for _, proto := range []string{ProtocolWebSocket, ProtocolGRPC} {
		t.Run(proto, func(t *testing.T) {
			h, err := NewStreamHolder(StreamConfig{URL: "http://" + ln.Addr().String() + "/", Protocol: proto, Streams: 1,
				Reconnect: Reconnect{Policy: "fixed", Delay: time.Second}}, clock.RealClock{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { h.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			ev := waitEvents(t, h, "a failure", func(ev []StreamEvent) bool { return count(ev, EventFail) > 0 })
			if ev[0].Kind != EventFail || ev[0].How != "status_502" {
				t.Fatalf("first event %+v, want a status_502 failure", ev[0])
			}
			// The attempt's span: a clean 100 ms of the herd must not
			// overlap it (measure's busiestClean).
			if e := ev[0]; e.Began.IsZero() || e.Began.After(e.At) {
				t.Errorf("failure began %v, failed %v: want the attempt's start, no later than its failure", e.Began, e.At)
			}
		})
	}
}

// TestRunnerHoldsStreams: a runner with --streams holds them to its one URL
// (a real probe on loopback) and serves their events in its /stats.
func TestRunnerHoldsStreams(t *testing.T) {
	p := serveProbe(t, probe.StreamDrain{Mode: probe.DrainNone}, time.Minute)
	sc := &StreamConfig{URL: p.url, Protocol: ProtocolWebSocket, Streams: 3, Reconnect: Reconnect{Policy: ReconnectImmediate}}
	cfg := RunnerConfig{Load: Config{URL: p.url, Rate: 10}, StatsListen: "127.0.0.1:0",
		Deadline: time.Now().Add(time.Minute), Streams: sc}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- RunRunner(ctx, cfg, clock.RealClock{}, func(a net.Addr) { addr <- a }) }()
	defer func() { cancel(); <-done }()
	stats := "http://" + (<-addr).String() + PathStats
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(stats)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s, err := ParseStats(b)
		if err != nil {
			t.Fatal(err)
		}
		if count(s.Streams, EventOpen) == 3 {
			for _, e := range s.Streams {
				if e.Pod != "pod-a" || e.At.IsZero() {
					t.Errorf("event %+v: want an open to pod-a, stamped", e)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats streams %+v, want 3 opens", s.Streams)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGRPCCloseKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		how  string
		code int
	}{
		{"trailers OK", io.EOF, CloseGRPCStatus, 0},
		{"server status", status.Error(codes.Aborted, "x"), CloseGRPCStatus, int(codes.Aborted)},
		{"transport reset", status.Error(codes.Unavailable, "error reading from server: read tcp: connection reset by peer"), CloseReset, int(codes.Unavailable)},
		{"transport eof", status.Error(codes.Unavailable, "error reading from server: EOF"), CloseEOF, int(codes.Unavailable)},
		// The text of grpc-go's internal/transport/http2_client.go
		// handleRSTStream for an intermediary's INTERNAL_ERROR reset.
		{"rst_stream", status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"), CloseReset, int(codes.Internal)},
		// REFUSED_STREAM becomes UNAVAILABLE (http_util.go http2ErrConvTab),
		// yet it is a reset frame, not a broken transport.
		{"rst_stream refused", status.Error(codes.Unavailable, "stream terminated by RST_STREAM with error code: REFUSED_STREAM"), CloseReset, int(codes.Unavailable)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			how, code := grpcCloseKind(tc.err)
			if how != tc.how || code != tc.code || Graceful(how) != (tc.how == CloseGRPCStatus) {
				t.Errorf("grpcCloseKind(%v) = %s, %d; want %s, %d", tc.err, how, code, tc.how, tc.code)
			}
		})
	}
}

func TestOpenStreams(t *testing.T) {
	ev := []StreamEvent{
		{Slot: 0, Kind: EventOpen}, {Slot: 1, Kind: EventOpen}, {Slot: 2, Kind: EventFail},
		{Slot: 0, Kind: EventClose}, {Slot: 0, Kind: EventFail}, {Slot: 2, Kind: EventOpen},
	}
	if got := OpenStreams(ev); got != 2 {
		t.Errorf("OpenStreams = %d, want 2 (slots 1 and 2)", got)
	}
	if got := OpenStreams(nil); got != 0 {
		t.Errorf("OpenStreams(nil) = %d", got)
	}
}

// A holder that stops ends its WebSocket streams with a close frame (1001,
// going away), as a client that leaves does; the probe records each as a
// graceful end by the peer, with that code.
func TestStreamHolderStopSendsGoingAway(t *testing.T) {
	p := serveProbe(t, probe.StreamDrain{Mode: probe.DrainNone}, time.Minute)
	const n = 2
	_, cancel := holdStreams(t, StreamConfig{URL: p.url, Protocol: ProtocolWebSocket, Streams: n,
		Reconnect: Reconnect{Policy: "fixed", Delay: time.Second}})
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(p.url + strings.TrimPrefix(probe.PathTimeline, "/"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tl, err := probe.ParseTimeline(b)
		if err != nil {
			t.Fatal(err)
		}
		if l := tl.Streams; l != nil && l.Ended[probe.EndPeerClose] >= n {
			for _, r := range l.Records {
				if r.Ended != nil && (r.How != probe.EndPeerClose || r.Code == nil || *r.Code != 1001) {
					t.Errorf("probe's record of a stream the holder ended: %+v, want peer_close 1001", r)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe's stream log %+v: want %d streams ended by the peer's close", tl.Streams, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGRPCEndAt: an end that came in a frame (trailers, an intermediary's
// RST_STREAM) is stamped at that frame's arrival, like a WebSocket's close
// frame; a broken transport at the first sign of the end (the end door or
// the failed read); either falls back to the read's return.
func TestGRPCEndAt(t *testing.T) {
	data, end, now := t0.Add(time.Millisecond), t0.Add(2*time.Millisecond), t0.Add(time.Second)
	sc := &stampConn{}
	sc.data.Store(data.UnixNano())
	sc.end.Store(end.UnixNano())
	for _, tc := range []struct {
		name string
		err  error
		sc   *stampConn
		want time.Time
	}{
		{"trailers OK", io.EOF, sc, data},
		{"server status", status.Error(codes.Aborted, "x"), sc, data},
		{"rst_stream", status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"), sc, data},
		{"rst_stream refused", status.Error(codes.Unavailable, "stream terminated by RST_STREAM with error code: REFUSED_STREAM"), sc, data},
		{"transport reset", status.Error(codes.Unavailable, "error reading from server: read tcp: connection reset by peer"), sc, end},
		{"no connection", status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"), nil, now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := grpcEndAt(tc.err, tc.sc, now); !got.Equal(tc.want) {
				t.Errorf("grpcEndAt = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStreamHolderGRPCOverTLS: an https --url holds its gRPC streams over
// TLS (server name from --host, ALPN h2), to port 443 when the URL has none;
// plaintext to a TLS port never reached the server's handler.
func TestStreamHolderGRPCOverTLS(t *testing.T) {
	var mu sync.Mutex
	var hello *tls.ClientHelloInfo
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no backend", http.StatusBadGateway)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		mu.Lock()
		hello = h
		mu.Unlock()
		return nil, nil
	}}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	// httptest's certificate names example.com.
	h, err := NewStreamHolder(StreamConfig{URL: "https://" + srv.Listener.Addr().String() + "/", Host: "example.com", Protocol: ProtocolGRPC,
		Streams: 1, Reconnect: Reconnect{Policy: "fixed", Delay: time.Second}, TLS: &tls.Config{RootCAs: roots}}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	ev := waitEvents(t, h, "a failure", func(ev []StreamEvent) bool { return count(ev, EventFail) > 0 })
	if ev[0].How != "status_502" {
		t.Fatalf("first event %+v: want the handler's 502 over TLS", ev[0])
	}
	mu.Lock()
	defer mu.Unlock()
	if hello == nil || hello.ServerName != "example.com" || !slices.Contains(hello.SupportedProtos, "h2") {
		t.Errorf("client hello %+v: want server name example.com, ALPN h2", hello)
	}

	def, err := NewStreamHolder(StreamConfig{URL: "https://ingress.test/", Protocol: ProtocolGRPC, Streams: 1}, clock.RealClock{})
	if err != nil || def.target != "ingress.test:443" {
		t.Errorf("https without a port: target %q (%v), want ingress.test:443", def.target, err)
	}
}
