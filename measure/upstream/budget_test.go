package upstream

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestNextPoll(t *testing.T) {
	const iv = time.Second
	for _, tc := range []struct {
		took    time.Duration
		want    time.Duration // from the poll's start
		overrun bool
	}{
		{0, iv, false},
		{300 * time.Millisecond, iv, false},
		{iv, iv, false},
		// Past the interval: as long again after it ended.
		{1500 * time.Millisecond, 3 * time.Second, true},
		{10 * time.Second, 20 * time.Second, true},
	} {
		next, over := nextPoll(t0, tc.took, iv)
		if next.Sub(t0) != tc.want || over != tc.overrun {
			t.Errorf("took %s: next after %s (overrun %v), want %s (%v)", tc.took, next.Sub(t0), over, tc.want, tc.overrun)
		}
	}
}

func TestPollStats(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		took    []time.Duration // poll times, spaced as Run spaces them (nextPoll)
		wantP99 time.Duration
		wantRes time.Duration // 0: interval + p99
	}{
		// Fewer than 100 polls: nearest rank is the maximum.
		{"50 polls", ramp(50, ms), 50 * ms, 0},
		// 200 polls of 1..200 ms: the 198th value.
		{"200 polls", ramp(200, ms), 198 * ms, 0},
		// The window keeps the last pollWindow polls: an early slow poll
		// falls out of the quantile (not out of Max).
		{"window", append([]time.Duration{time.Minute}, ramp(pollWindow, time.Microsecond)...), time.Duration(pollWindow*99/100+1) * time.Microsecond, 0},
		// Every poll overran (1.5 s at a 1 s interval): kept 3 s apart,
		// the resolution is that spacing plus the poll time.
		{"overruns", []time.Duration{1500 * ms, 1500 * ms, 1500 * ms, 1500 * ms}, 1500 * ms, 4500 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l pollLog
			var bytes int64
			s := t0
			for _, d := range tc.took {
				next, overrun := nextPoll(s, d, time.Second)
				l.add(s, s.Add(d), 1000, overrun)
				bytes += 1000
				s = next
			}
			st := l.stats(time.Second)
			if st.P99 != tc.wantP99 || st.Polls != len(tc.took) || st.Bytes != bytes {
				t.Errorf("p99 %s, polls %d, bytes %d; want %s, %d, %d", st.P99, st.Polls, st.Bytes, tc.wantP99, len(tc.took), bytes)
			}
			wantRes := tc.wantRes
			if wantRes == 0 {
				wantRes = time.Second + tc.wantP99
			}
			if st.Resolution() != wantRes {
				t.Errorf("resolution %s, want %s", st.Resolution(), wantRes)
			}
			var longest time.Duration
			for _, d := range tc.took {
				longest = max(longest, d)
			}
			if st.Max != longest {
				t.Errorf("max %s, want %s", st.Max, longest)
			}
		})
	}
}

func ramp(n int, unit time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * unit
	}
	return out
}

// slowObserver's polls move the fake clock on by took, as a struggling
// controller would, and fail the test if two polls ever overlap.
type slowObserver struct {
	t     *testing.T
	fc    *clocktesting.FakeClock
	took  time.Duration
	busy  atomic.Bool
	polls atomic.Int32
}

func (o *slowObserver) Name() string                               { return "slow" }
func (o *slowObserver) Resolution() time.Duration                  { return time.Second }
func (o *slowObserver) Settings(context.Context) map[string]string { return nil }
func (o *slowObserver) Close() error                               { return nil }
func (o *slowObserver) Poll(context.Context) (Snapshot, error) {
	if !o.busy.CompareAndSwap(false, true) {
		o.t.Error("polls overlap")
	}
	defer o.busy.Store(false)
	o.polls.Add(1)
	s := o.fc.Now()
	o.fc.Step(o.took)
	return Snapshot{Sent: s, At: o.fc.Now(), Replicas: []ReplicaUpstreams{{Replica: "r", Sent: s, At: o.fc.Now(), Bytes: 100}}}, nil
}

// timerClock tells the test of each timer the tracker makes. A test moves
// the fake clock only once the tracker has set its pause: the tracker reads
// Now, then asks NewTimer for the rest of the pause, and FakeClock.NewTimer
// adds that to its own time, so a SetTime between the two pushed the pause's
// end past where the test looked for the poll (the CI failure "no poll
// within 20 s of the tick", on a machine busy compiling).
type timerClock struct {
	*clocktesting.FakeClock
	made chan struct{}
}

func newTimerClock(fc *clocktesting.FakeClock) *timerClock {
	return &timerClock{FakeClock: fc, made: make(chan struct{}, 64)}
}

func (c *timerClock) NewTimer(d time.Duration) clock.Timer {
	tm := c.FakeClock.NewTimer(d)
	select {
	case c.made <- struct{}{}:
	default:
	}
	return tm
}

// waitTimer waits for the tracker's next timer.
func (c *timerClock) waitTimer(t *testing.T) {
	t.Helper()
	select {
	case <-c.made:
	case <-time.After(20 * time.Second):
		t.Fatal("the tracker set no pause within 20 s")
	}
}

// TestTrackerBacksOff: polls that take 2.5 s at a 1 s interval are spaced
// 5 s apart (start to start), never overlap, are counted as overruns and
// reported, and the resolution grows to interval + poll time.
func TestTrackerBacksOff(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	obs := &slowObserver{t: t, fc: fc, took: 2500 * time.Millisecond}
	tc := newTimerClock(fc)
	tr := NewTracker(obs, tc, 10*time.Second)
	var mu sync.Mutex
	var notes []string
	tr.SetNotify(func(s string) { mu.Lock(); notes = append(notes, s); mu.Unlock() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	// waitNotes waits for the n-th back-off report: poll n is done and
	// overran, and the tracker is (about to be) pausing.
	waitNotes := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			got := len(notes)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no back-off report for poll %d", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := 1; i <= 3; i++ {
		waitNotes(i)
		tc.waitTimer(t)
		start := t0.Add(time.Duration(i-1) * 5 * time.Second)
		// Just before start + 2×took: no poll yet.
		fc.SetTime(start.Add(5*time.Second - time.Millisecond))
		if n := obs.polls.Load(); n != int32(i) {
			t.Fatalf("poll %d: the next poll came before the back-off ended (%d polls)", i, n)
		}
		_, next := tr.Latest()
		fc.SetTime(start.Add(5 * time.Second))
		waitPoll(t, next)
	}
	cancel()
	<-done
	st := tr.Stats()
	// The polls were kept 2×took apart, not an interval: a change just
	// after one poll's request reached the controller shows only in the
	// answer of the poll 2×took later, which took took.
	if st.Polls != 4 || st.Overruns != 4 || st.P99 != obs.took || st.Spacing != 2*obs.took || st.Resolution() != 3*obs.took || st.Bytes != 400 {
		t.Errorf("stats %+v, want 4 polls, 4 overruns, p99 %s, spacing %s, resolution %s, 400 bytes", st, obs.took, 2*obs.took, 3*obs.took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) < 3 || !strings.Contains(notes[0], "longer than the 1s interval") || !strings.Contains(notes[0], "waits 2.5s") {
		t.Errorf("notes %q: want one per overrun, saying the poll time and the wait", notes)
	}
}

// traefikAPI serves Traefik's API the way pkg/api does: the whole list at
// /api/http/services, one service by name at /api/http/services/{name}
// (404 {"message":"service not found: …"} for a name it lacks), and the
// router's plain "404 page not found" elsewhere. It counts bytes served.
type traefikAPI struct {
	*httptest.Server
	mu       sync.Mutex
	services map[string]string // name → representation
	bytes    int64
	paths    []string
}

func newTraefikAPI(t *testing.T, others int) *traefikAPI {
	a := &traefikAPI{services: map[string]string{}}
	for i := range others {
		name := fmt.Sprintf("ballast-svc%d-80@kubernetes", i)
		a.services[name] = fmt.Sprintf(`{"loadBalancer":{"servers":[{"url":"http://10.96.%d.%d:8080"}]},"name":%q,"provider":"kubernetes"}`, i/250, i%250, name)
	}
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, code int, body string) {
		a.mu.Lock()
		a.bytes += int64(len(body))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}
	mux.HandleFunc("GET /api/http/services", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.paths = append(a.paths, r.URL.Path)
		var all []string
		for _, s := range a.services {
			all = append(all, s)
		}
		a.mu.Unlock()
		write(w, 200, "["+strings.Join(all, ",")+"]")
	})
	mux.HandleFunc("GET /api/http/services/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		a.mu.Lock()
		a.paths = append(a.paths, r.URL.Path)
		s, ok := a.services[name]
		a.mu.Unlock()
		if !ok {
			write(w, 404, fmt.Sprintf(`{"message":"service not found: %s"}`, name))
			return
		}
		write(w, 200, s)
	})
	a.Server = httptest.NewServer(mux)
	t.Cleanup(a.Close)
	return a
}

func (a *traefikAPI) set(name, body string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if body == "" {
		delete(a.services, name)
		return
	}
	a.services[name] = body
}

func (a *traefikAPI) served() (int64, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, p := a.bytes, a.paths
	a.bytes, a.paths = 0, nil
	return b, p
}

// TestTraefikByName: against a Traefik API holding 2,000 other services,
// the observer asks only for the Target's services by exact name (the
// Ingress provider's and the ingress-nginx provider's), so a poll reads a
// few hundred bytes, not the table; a name Traefik does not hold lists
// nothing; a fenced server is withdrawn; a wrong URL is blind, not empty.
func TestTraefikByName(t *testing.T) {
	api := newTraefikAPI(t, 2000)
	const name = "epwindow-epwindow-probe-80@kubernetes"
	const keep, drop = "10.244.0.6:8080", "10.244.0.5:8080"
	api.set(name, traefikServicePayload([]string{drop, keep}))
	obs, _, err := New(context.Background(), KindTraefik, Deps{Clock: clock.RealClock{}}, probeTarget,
		Options{Interval: time.Second, URLs: []string{api.URL}})
	if err != nil {
		t.Fatal(err)
	}
	poll := func() ReplicaUpstreams {
		t.Helper()
		s, err := obs.Poll(context.Background())
		if err != nil || len(s.Replicas) != 1 {
			t.Fatalf("poll: %v %+v", err, s)
		}
		return s.Replicas[0]
	}
	r := poll()
	bytes, paths := api.served()
	want := []string{"/api/http/services/" + name, "/api/http/services/epwindow-probe-epwindow-probe-80@kubernetesingressnginx"}
	if r.Err != nil || !sameAddrs(r.Upstreams, aps(drop, keep)) {
		t.Fatalf("got %+v, want both servers", r)
	}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("paths %q, want %q", paths, want)
	}
	if bytes != r.Bytes || bytes > 1000 {
		t.Errorf("served %d bytes, reading counted %d: want them equal and under 1 kB with 2,000 other services", bytes, r.Bytes)
	}

	api.set(name, traefikServicePayload([]string{drop, keep}, drop))
	if r := poll(); r.Err != nil || !sameAddrs(r.Upstreams, aps(keep)) {
		t.Errorf("fenced: got %+v, want only %s", r, keep)
	}
	api.set(name, "")
	if r := poll(); r.Err != nil || len(r.Upstreams) != 0 {
		t.Errorf("service gone: got %+v, want an empty, readable list", r)
	}

	wrong, _, err := New(context.Background(), KindTraefik, Deps{Clock: clock.RealClock{}}, probeTarget,
		Options{Interval: time.Second, URLs: []string{api.URL + "/dashboard/api/http/services"}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := wrong.Poll(context.Background())
	if len(s.Replicas) != 1 || s.Replicas[0].Err == nil || !strings.Contains(s.Replicas[0].Err.Error(), "404") {
		t.Errorf("wrong URL: got %+v, want a blind reading naming the 404", s.Replicas)
	}
}

func sameAddrs(a, b []netip.AddrPort) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

// TestBodyBudget: a payload past the budget is a blind reading that says
// so and names the flags to change, never a silently cut table.
func TestBodyBudget(t *testing.T) {
	var routes []string
	for i := range 2000 {
		routes = append(routes, fmt.Sprintf(`{"id":"kube_ballast__svc%d__h____svc%d","backend":{"type":"lb","endpoints":["http://10.96.7.%d:8080"]}}`, i, i, i%250))
	}
	srv := newPayloadServer(t, clock.RealClock{}, "["+strings.Join(routes, ",")+"]")
	obs, _, err := New(context.Background(), KindSkipper, Deps{Clock: clock.RealClock{}}, probeTarget,
		Options{Interval: time.Second, URLs: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := obs.Poll(context.Background())
	full := len(srv.body)
	if r := s.Replicas[0]; r.Err != nil || r.Bytes != int64(full) {
		t.Fatalf("within the budget: %+v, want %d bytes read", r, full)
	}
	obs.(*httpObserver).bodyBudget = int64(full / 2)
	s, _ = obs.Poll(context.Background())
	if r := s.Replicas[0]; r.Err == nil || !strings.Contains(r.Err.Error(), "budget") || !strings.Contains(r.Err.Error(), "--"+FlagObserverURL) {
		t.Errorf("past the budget: %+v, want an error naming the budget and --%s", r, FlagObserverURL)
	}
}

// TestPodSourcePinsNamespace: controller pods found across all namespaces
// but all in one are re-listed in that namespace only (the first list is
// the one cluster-wide request a run makes for them).
func TestPodSourcePinsNamespace(t *testing.T) {
	running := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"application": "skipper-ingress"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	cs := fake.NewClientset(running("kube-system", "skipper-1"), running("kube-system", "skipper-2"))
	fc := clocktesting.NewFakeClock(t0)
	s := &podSource{client: cs, selector: "application=skipper-ingress", refresh: time.Second, now: fc.Now}
	for range 3 {
		if pods, err := s.list(context.Background()); err != nil || len(pods) != 2 {
			t.Fatalf("list: %d pods, %v", len(pods), err)
		}
		fc.Step(2 * time.Second)
	}
	var nss []string
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			nss = append(nss, a.GetNamespace())
		}
	}
	if strings.Join(nss, ",") != ",kube-system,kube-system" {
		t.Errorf("lists in namespaces %q, want one cluster-wide list and then kube-system only", nss)
	}
}

// TestSkipperURLGetsTheLimit: an --observer-url naming Skipper's /routes
// (as the local cluster prints it) is read with the observer's limit: by
// default Skipper serves 1,024 routes a page (defaultRouteListingLimit in
// routing/routing.go), and with 2,000 Ingresses the probe's routes were on
// a page never read. A URL with its own query is the user's to keep.
func TestSkipperURLGetsTheLimit(t *testing.T) {
	h := &httpObserver{path: "/routes?limit=1000000"}
	for base, want := range map[string]string{
		"http://127.0.0.1:9911":                 "http://127.0.0.1:9911/routes?limit=1000000",
		"http://127.0.0.1:9911/":                "http://127.0.0.1:9911/routes?limit=1000000",
		"http://127.0.0.1:9911/routes":          "http://127.0.0.1:9911/routes?limit=1000000",
		"http://127.0.0.1:9911/routes/":         "http://127.0.0.1:9911/routes?limit=1000000",
		"http://127.0.0.1:9911/routes?limit=50": "http://127.0.0.1:9911/routes?limit=50",
		"http://127.0.0.1:9911/skipper/routes":  "http://127.0.0.1:9911/skipper/routes",
	} {
		if got := h.requestURL(base); got != want {
			t.Errorf("requestURL(%q) = %q, want %q", base, got, want)
		}
	}
}

// bigObserver answers instantly (fake clock) with a payload of size bytes.
type bigObserver struct {
	fc    *clocktesting.FakeClock
	size  int64
	polls atomic.Int32
}

func (o *bigObserver) Name() string                               { return "big" }
func (o *bigObserver) Resolution() time.Duration                  { return 500 * time.Millisecond }
func (o *bigObserver) Settings(context.Context) map[string]string { return nil }
func (o *bigObserver) Close() error                               { return nil }
func (o *bigObserver) Poll(context.Context) (Snapshot, error) {
	o.polls.Add(1)
	now := o.fc.Now()
	return Snapshot{Sent: now, At: now, Replicas: []ReplicaUpstreams{{Replica: "r", Sent: now, At: now, Bytes: o.size}}}, nil
}

// TestTrackerByteBudget: a 780 kB table (2,000 Skipper routes) at a 500 ms
// interval is read every 780 ms, so the observer stays within ByteBudget;
// the resolution says so, and one report tells why.
func TestTrackerByteBudget(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	obs := &bigObserver{fc: fc, size: 780_000}
	tc := newTimerClock(fc)
	tr := NewTracker(obs, tc, 10*time.Second)
	var mu sync.Mutex
	var notes []string
	tr.SetNotify(func(s string) { mu.Lock(); notes = append(notes, s); mu.Unlock() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	_, next := tr.Latest()
	go func() { done <- tr.Run(ctx) }()
	waitPoll(t, next)
	gap := 780 * time.Millisecond
	for i := 1; i <= 4; i++ {
		start := t0.Add(time.Duration(i-1) * gap)
		// Wait until the tracker is pausing, then step to just before the
		// budget allows the next poll: none may come.
		tc.waitTimer(t)
		fc.SetTime(start.Add(gap - time.Millisecond))
		time.Sleep(20 * time.Millisecond) // a poll that wrongly came would have counted by now
		if n := obs.polls.Load(); n != int32(i) {
			t.Fatalf("poll %d: %d polls before the budget's gap ended", i, n)
		}
		_, next := tr.Latest()
		fc.SetTime(start.Add(gap))
		waitPoll(t, next)
	}
	cancel()
	<-done
	st := tr.Stats()
	if st.Gap != gap || st.Resolution() != gap || st.Stretched != 5 || st.Overruns != 0 {
		t.Errorf("stats %+v: want gap and resolution %s, 5 stretched polls, no overrun", st, gap)
	}
	// Paced at the budget, the controller sees exactly ByteBudget a second:
	// 5 polls' bytes over the 4 gaps between them would say 1.25 MB/s.
	if got, want := st.BytesPerMinute(), 60.0*ByteBudget; math.Abs(got-want) > 1 {
		t.Errorf("BytesPerMinute %.0f, want %.0f: the polls are paced at the budget", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) != 1 || !strings.Contains(notes[0], "780 kB") || !strings.Contains(notes[0], "every 780ms, not every 500ms") {
		t.Errorf("notes %q: want one report of the stretched interval", notes)
	}
}
