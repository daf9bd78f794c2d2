package load

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/epwindow/epwindow/probe"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// eventually polls cond until it holds or 10 s pass; it checks a condition,
// it does not sleep and hope.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// start runs g.Run in the background; the returned stop cancels it and
// waits for it to return.
func start(t *testing.T, g *Generator) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return 30 s after its context ended")
		}
	}
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func okResponse(r *http.Request, pod string) *http.Response {
	h := http.Header{}
	h.Set(HeaderPod, pod)
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("ok")), Request: r}
}

func fakeGenerator(t *testing.T, cfg Config, fc *clocktesting.FakeClock, rt roundTripFunc) *Generator {
	t.Helper()
	g, err := New(cfg, fc)
	if err != nil {
		t.Fatal(err)
	}
	g.client.Transport = rt
	return g
}

// TestGeneratorSchedule checks the schedule itself on a fake clock: at 100
// req/s, after each 10 ms step exactly one more request has gone out, and the
// generator is parked on its timer (not sending more) before the next step.
func TestGeneratorSchedule(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	g := fakeGenerator(t, Config{URL: "http://probe.test/", Rate: 100}, fc,
		func(r *http.Request) (*http.Response, error) { return okResponse(r, "pod-a"), nil })
	stop := start(t, g)
	defer stop()

	// Step only while the generator is parked on its timer: its timer is
	// relative (like time.Timer), so a step racing its Pace call would
	// postpone the wake-up rather than test the schedule.
	for k := int64(1); ; k++ {
		eventually(t, "hit "+strconv.FormatInt(k, 10), func() bool {
			tot := g.Totals()
			return tot.Sent == k && tot.OK == k && fc.HasWaiters()
		})
		if tot := g.Totals(); tot.Sent != k || tot.LagMax != 0 {
			t.Fatalf("after %d steps of 10ms: %d requests sent with lag up to %v, want %d on time", k-1, tot.Sent, tot.LagMax, k)
		}
		if k == 51 {
			break
		}
		fc.Step(10 * time.Millisecond)
	}
	// A late wake-up (here: one step of a whole second) is caught up at once,
	// not skipped: the hits due at 510ms, 520ms, …, 1500ms all go out.
	fc.Step(time.Second)
	eventually(t, "catch-up", func() bool { return g.Totals().Sent == 151 && fc.HasWaiters() })
	eventually(t, "responses", func() bool { return g.Totals().OK == 151 })
	tot := g.Totals()
	if tot.Dropped != 0 || tot.Failed != 0 || tot.Hits != 151 {
		t.Errorf("totals = %+v, want 151 hits, 151 sent, none dropped or failed", tot)
	}
	// The hit due at 510ms went out at 1500ms: the lag is the wake-up's.
	if tot.LagMax != 990*time.Millisecond {
		t.Errorf("lag max = %v, want 990ms", tot.LagMax)
	}
	if ps, ok := g.Pod("pod-a"); !ok || ps.Responses != 151 {
		t.Errorf("Pod(pod-a) = %+v, %v; want 151 responses", ps, ok)
	}
}

// TestGeneratorOpenLoop: responses that never come must not slow the
// schedule; beyond MaxConns requests in flight, due requests are dropped and
// counted, not queued.
func TestGeneratorOpenLoop(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	release := make(chan struct{})
	g := fakeGenerator(t, Config{URL: "http://probe.test/", Rate: 100, MaxConns: 5, Timeout: time.Minute}, fc,
		func(r *http.Request) (*http.Response, error) {
			<-release
			return okResponse(r, "pod-a"), nil
		})
	stop := start(t, g)
	for k := int64(1); k <= 20; k++ {
		eventually(t, "hit "+strconv.FormatInt(k, 10), func() bool { return g.Totals().Hits == k && fc.HasWaiters() })
		fc.Step(10 * time.Millisecond)
	}
	eventually(t, "hit 21", func() bool { return g.Totals().Hits == 21 && fc.HasWaiters() })
	tot := g.Totals()
	if tot.Sent != 5 || tot.Dropped != 16 || tot.InFlight != 5 {
		t.Errorf("totals = %+v, want 5 sent (in flight), 16 dropped", tot)
	}
	// Drops are recorded at their scheduled instants: 50ms … 200ms.
	if got := g.Failures(t0.Add(50*time.Millisecond), t0.Add(200*time.Millisecond)); got[KindDropped] != 15 {
		t.Errorf("Failures(50ms, 200ms) = %v, want 15 dropped", got)
	}
	close(release)
	stop()
	if tot := g.Totals(); tot.OK != 5 || tot.InFlight != 0 {
		t.Errorf("after release: totals = %+v, want 5 ok, 0 in flight", tot)
	}
}

// probeHandler answers like the probe: 200 and the traffic body, its pod
// name and its clock shifted by offset.
func probeHandler(pods []string, offset time.Duration) http.HandlerFunc {
	var n atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) {
		pod := pods[int(n.Add(1))%len(pods)]
		w.Write(probe.AppendTrafficBody(nil, pod, time.Now().Add(offset)))
	}
}

// headerProbeHandler says the same in the headers (HeaderPod, HeaderTime),
// as the probe's other replies do, with a body of its own.
func headerProbeHandler(pods []string, offset time.Duration) http.HandlerFunc {
	var n atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) {
		pod := pods[int(n.Add(1))%len(pods)]
		w.Header().Set(HeaderPod, pod)
		w.Header().Set(HeaderTime, strconv.FormatInt(time.Now().Add(offset).UnixNano(), 10))
		io.WriteString(w, "ok\n")
	}
}

func TestGeneratorAttribution(t *testing.T) {
	pods := []string{"pod-a", "pod-b", "pod-c"}
	for _, tc := range []struct {
		name      string
		keepAlive bool
		handler   func([]string, time.Duration) http.HandlerFunc
	}{
		{"body/keepalive=false", false, probeHandler},
		{"body/keepalive=true", true, probeHandler},
		{"headers/keepalive=false", false, headerProbeHandler},
		{"headers/keepalive=true", true, headerProbeHandler},
	} {
		keepAlive := tc.keepAlive
		t.Run(tc.name, func(t *testing.T) {
			var hostSeen atomic.Value
			probe := tc.handler(pods, 0)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hostSeen.Store(r.Host)
				probe(w, r)
			}))
			defer srv.Close()
			g, err := New(Config{URL: srv.URL + "/", Host: "app.example", Rate: 200, KeepAlive: keepAlive}, clock.RealClock{})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, g)
			eventually(t, "30 responses", func() bool { return g.Totals().OK >= 30 })
			stop()

			tot := g.Totals()
			if tot.Failed != 0 || tot.Dropped != 0 || tot.Unattributed != 0 || tot.OK != tot.Sent || tot.InFlight != 0 {
				t.Errorf("totals = %+v, want every request sent and answered", tot)
			}
			if h, _ := hostSeen.Load().(string); h != "app.example" {
				t.Errorf("server saw Host %q, want app.example", h)
			}
			var sum int64
			for _, pod := range pods {
				ps, ok := g.Pod(pod)
				if !ok {
					t.Fatalf("Pod(%s) not seen", pod)
				}
				sum += ps.Responses
				if ps.Pod != pod || ps.First.After(ps.Last) || ps.FirstSent.After(ps.First) || ps.LastSent.After(ps.Last) {
					t.Errorf("Pod(%s) = %+v: want sent ≤ received and first ≤ last", pod, ps)
				}
				// Same machine, same clock: the true offset is 0, so 0 must
				// lie inside the estimate's bound (see Estimate).
				e, ok := g.Skew(pod)
				if !ok || e.Samples != int(ps.Responses) || abs(e.Offset) > e.Uncertainty {
					t.Errorf("Skew(%s) = %v, %v; want a sample per response and |offset| ≤ uncertainty", pod, e, ok)
				}
			}
			if sum != tot.OK {
				t.Errorf("per-pod responses sum to %d, want %d", sum, tot.OK)
			}
			if _, ok := g.Pod("pod-z"); ok {
				t.Error("Pod(pod-z) reported a pod that never answered")
			}
			if got := len(g.Pods()); got != 3 {
				t.Errorf("Pods() has %d pods, want 3", got)
			}
		})
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// rawServer accepts TCP connections and hands each, after the request head
// was read, to handle.
func rawServer(t *testing.T, handle func(*net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						c.Close()
						return
					}
					if line == "\r\n" {
						break
					}
				}
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/"
}

func TestGeneratorFailureKinds(t *testing.T) {
	refusedURL := func(t *testing.T) string {
		// A port that was just free: nothing listens there.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		u := "http://" + ln.Addr().String() + "/"
		ln.Close()
		return u
	}
	handlerURL := func(h http.HandlerFunc) func(*testing.T) string {
		return func(t *testing.T) string {
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			return srv.URL + "/"
		}
	}
	tests := []struct {
		name      string
		url       func(*testing.T) string
		keepAlive bool
		want      string
	}{
		{"refused", refusedURL, false, KindRefused},
		{"reset", func(t *testing.T) string {
			return rawServer(t, func(c *net.TCPConn) {
				c.SetLinger(0) // close with RST
				c.Close()
			})
		}, false, KindReset},
		{"eof", func(t *testing.T) string {
			return rawServer(t, func(c *net.TCPConn) { c.Close() })
		}, false, KindEOF},
		{"eof in body", func(t *testing.T) string {
			return rawServer(t, func(c *net.TCPConn) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Epwindow-Pod: pod-a\r\n\r\nshort")
				c.Close()
			})
		}, false, KindEOF},
		{"502", handlerURL(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }), true, "status_502"},
		{"503", handlerURL(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }), false, "status_503"},
		{"timeout", handlerURL(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }), true, KindTimeout},
		{"unattributed", handlerURL(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "default backend") }), true, KindUnattributed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := New(Config{URL: tt.url(t), Rate: 100, KeepAlive: tt.keepAlive, Timeout: 200 * time.Millisecond, MaxConns: 1000}, clock.RealClock{})
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			stop := start(t, g)
			eventually(t, "3 finished requests", func() bool { tot := g.Totals(); return tot.OK+tot.Failed >= 3 })
			stop()
			after := time.Now()

			tot := g.Totals()
			got := g.Failures(time.Time{}, time.Time{})
			want := int(tot.Failed)
			if tt.want == KindUnattributed {
				want = int(tot.Unattributed)
			}
			if len(got) != 1 || got[tt.want] != want || want < 3 {
				t.Errorf("Failures = %v (totals %+v), want only %q, ≥ 3 of them", got, tot, tt.want)
			}
			// Failures are filed under the request's scheduled instant,
			// which lies inside the run.
			if in := g.Failures(before, after); in[tt.want] != want {
				t.Errorf("Failures(run) = %v, want %d %q", in, want, tt.want)
			}
			if late := g.Failures(after, time.Time{}); len(late) != 0 {
				t.Errorf("Failures(after the run) = %v, want none", late)
			}
		})
	}
}

// TestGeneratorSkewOffset runs against a server whose clock is shifted by a
// known offset. The server reads its clock while handling the request, i.e.
// after the generator stamped s (the connection was ready) and before it
// stamped r (the first response byte arrived); so by construction the true
// offset lies within Offset ± Uncertainty of every sample, and of the best.
// TestUnattributedOK: with UnattributedOK a 2xx without the probe's header
// is a success that stays out of the failure history (verify's team app),
// while a real failure is still kept.
func TestUnattributedOK(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		io.WriteString(w, "team app")
	}))
	t.Cleanup(srv.Close)
	u := srv.URL + "/"
	g, err := New(Config{URL: u, Rate: 100, Timeout: 200 * time.Millisecond, UnattributedOK: true}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, g)
	eventually(t, "6 finished requests", func() bool { tot := g.Totals(); return tot.OK+tot.Failed >= 6 })
	stop()
	tot := g.Totals()
	got := g.Failures(time.Time{}, time.Time{})
	if tot.Unattributed < 3 || tot.Failed < 3 || len(got) != 1 || got["status_502"] != int(tot.Failed) {
		t.Errorf("Failures = %v (totals %+v), want only the %d status_502, and ≥ 3 unattributed successes", got, tot, tot.Failed)
	}
}

func TestGeneratorSkewOffset(t *testing.T) {
	for _, offset := range []time.Duration{2500 * time.Millisecond, -1300 * time.Millisecond, 0} {
		t.Run(offset.String(), func(t *testing.T) {
			srv := httptest.NewServer(probeHandler([]string{"pod-a"}, offset))
			defer srv.Close()
			g, err := New(Config{URL: srv.URL + "/", Rate: 200, KeepAlive: true}, clock.RealClock{})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, g)
			eventually(t, "20 responses", func() bool { return g.Totals().OK >= 20 })
			stop()
			e, ok := g.Skew("pod-a")
			if !ok {
				t.Fatal("no skew estimate for pod-a")
			}
			if err := abs(e.Offset - offset); err > e.Uncertainty {
				t.Errorf("estimate %v is %v off the injected %v, beyond its bound", e, err, offset)
			}
			// The bound is half the best loopback round trip of ≥ 20; a
			// second would mean the check above proved nothing.
			if e.Uncertainty >= time.Second {
				t.Errorf("estimate %v: uncertainty too wide to check the offset", e)
			}
		})
	}
}

func TestGeneratorMisuse(t *testing.T) {
	if _, err := New(Config{URL: "http://x/", Rate: 1}, nil); err == nil {
		t.Error("New with a nil clock: want an error")
	}
	if _, err := New(Config{URL: "http://x/"}, clock.RealClock{}); err == nil || !strings.Contains(err.Error(), "--rate") {
		t.Errorf("New without a rate: err = %v, want one naming --rate", err)
	}
	fc := clocktesting.NewFakeClock(t0)
	g := fakeGenerator(t, Config{URL: "http://probe.test/", Rate: 1}, fc,
		func(r *http.Request) (*http.Response, error) { return okResponse(r, "pod-a"), nil })
	stop := start(t, g)
	eventually(t, "first hit", func() bool { return g.Totals().Sent == 1 })
	if err := g.Run(context.Background()); err == nil {
		t.Error("second Run: want an error")
	}
	stop()
}

// POST load carries a body, so every request reaches the server as a
// non-idempotent POST (ingress controllers do not retry those).
func TestGeneratorPost(t *testing.T) {
	probe := probeHandler([]string{"pod-a"}, 0)
	var bad atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || string(b) != postBody {
			bad.Add(1)
		}
		probe(w, r)
	}))
	defer srv.Close()
	g, err := New(Config{URL: srv.URL + "/", Rate: 200, Method: http.MethodPost}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, g)
	eventually(t, "20 responses", func() bool { return g.Totals().OK >= 20 })
	stop()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d requests were not POSTs with the body", n)
	}
	if _, err := New(Config{URL: srv.URL, Rate: 1, Method: "DELETE"}, clock.RealClock{}); err == nil || !strings.Contains(err.Error(), "--load-method") {
		t.Fatalf("DELETE accepted: %v", err)
	}
}

// Settle waits for requests that hang (here: a server that answers 502 only
// once 300 ms have passed) so that failures filed under their scheduled
// instants are all counted.
func TestGeneratorSettle(t *testing.T) {
	openAt := time.Now().Add(300 * time.Millisecond)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Until(openAt))
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	g, err := New(Config{URL: srv.URL, Rate: 50}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, g)
	defer stop()
	eventually(t, "a request in flight", func() bool { return g.Totals().InFlight > 0 })
	until := time.Now()
	if !until.Before(openAt) {
		t.Fatal("the machine is too slow for this test's 300 ms gate")
	}
	if got := g.Failures(time.Time{}, until)["status_502"]; got != 0 {
		t.Fatalf("%d failures before any answer", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Settle(ctx, until); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if time.Now().Before(openAt) {
		t.Fatal("Settle returned before the hanging requests were answered")
	}
	if got := g.Failures(time.Time{}, until)["status_502"]; got < 1 {
		t.Fatalf("after Settle, %d status_502 failures before %v; want the hanging requests counted", got, until)
	}
}

// Settle must also wait for a request that is due before its instant but not
// yet dispatched: the dispatch loop can wake late (a busy machine), and the
// failure of that request would then be filed after the trial read its
// failures, outside every trial. Here the instants come from one fake clock
// and the loop's timers from another, held back, so the generator wakes late
// by construction.
func TestGeneratorSettleWaitsForDispatch(t *testing.T) {
	now := clocktesting.NewFakeClock(t0)
	timers := clocktesting.NewFakeClock(t0)
	g := fakeGenerator(t, Config{URL: "http://probe.test/", Rate: 10}, now,
		func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusBadGateway, Header: http.Header{},
				Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
		})
	g.timers = timers
	stop := start(t, g)
	defer stop()

	// Hits 0 and 1 (due at 0 and 100ms) go out and fail.
	eventually(t, "hit 0", func() bool { return g.Totals().Failed == 1 && timers.HasWaiters() })
	now.Step(100 * time.Millisecond)
	timers.Step(100 * time.Millisecond)
	eventually(t, "hit 1", func() bool { return g.Totals().Failed == 2 && timers.HasWaiters() })

	// The tool's clock passes end (250ms) while the loop still sleeps: hit 2,
	// due at 200ms, is neither sent nor in flight.
	now.Step(160 * time.Millisecond)
	end := t0.Add(250 * time.Millisecond)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Settle(cancelled, end); err == nil {
		t.Fatal("Settle returned nil while a request due before end was not yet dispatched")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	settled := make(chan error, 1)
	go func() { settled <- g.Settle(ctx, end) }()
	timers.Step(100 * time.Millisecond)
	if err := <-settled; err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if got := g.Failures(t0, end)["status_502"]; got != 3 {
		t.Fatalf("after Settle, %d status_502 failures before end; want 3 (hits due at 0, 100ms, 200ms)", got)
	}
}
