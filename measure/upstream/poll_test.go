package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// payloadServer stands in for one controller replica: it serves the current
// payload and logs, per request, when it arrived and which version it got.
type payloadServer struct {
	*httptest.Server
	clock clock.PassiveClock

	mu      sync.Mutex
	body    string
	version int
	log     []served
	accepts []string
}

type served struct {
	at      time.Time
	version int
}

func newPayloadServer(t *testing.T, clk clock.PassiveClock, body string) *payloadServer {
	s := &payloadServer{clock: clk, body: body}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.log = append(s.log, served{s.clock.Now(), s.version})
		s.accepts = append(s.accepts, r.URL.RequestURI()+" "+r.Header.Get("Accept"))
		body := s.body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

// set swaps the payload and returns the instants just before and after.
func (s *payloadServer) set(body string) (before, after time.Time) {
	before = s.clock.Now()
	s.mu.Lock()
	s.body = body
	s.version++
	s.mu.Unlock()
	return before, s.clock.Now()
}

// Payload builders in each controller's format (see the fixtures in
// testdata/ and the parsers for the source files they follow).
func nginxPayload(addrs ...string) string {
	var eps []string
	for _, a := range addrs {
		ap := netip.MustParseAddrPort(a)
		eps = append(eps, fmt.Sprintf(`{"address":%q,"port":"%d"}`, ap.Addr(), ap.Port()))
	}
	return `[{"name":"epwindow-epwindow-probe-80","port":80,"endpoints":[` + strings.Join(eps, ",") + `],"noServer":false}]`
}

func skipperPayload(addrs ...string) string {
	var eps []string
	for _, a := range addrs {
		eps = append(eps, fmt.Sprintf("%q", "http://"+a))
	}
	return `[{"id":"kube_epwindow__probe__probe_local_____epwindow_probe","backend":{"type":"lb","algorithm":"roundRobin","endpoints":[` + strings.Join(eps, ",") + `]}}]`
}

// traefikPayload lists every address; those in fenced are marked fenced,
// as Traefik does with a terminating endpoint.
func traefikPayload(all []string, fenced ...string) string {
	var srv []string
	for _, a := range all {
		srv = append(srv, fmt.Sprintf(`{"url":"http://%s","fenced":%v}`, a, contains(fenced, a)))
	}
	return `[{"loadBalancer":{"servers":[` + strings.Join(srv, ",") + `]},"status":"enabled","name":"epwindow-epwindow-probe-80@kubernetes","provider":"kubernetes"}]`
}

// traefikServicePayload is one service as GET /api/http/services/{name}
// answers it (getService in pkg/api/handler_http.go).
func traefikServicePayload(all []string, fenced ...string) string {
	list := traefikPayload(all, fenced...)
	return strings.TrimSuffix(strings.TrimPrefix(list, "["), "]")
}

// envoyPayload lists every address; those in draining are DRAINING, as Envoy
// Gateway keeps terminating endpoints.
func envoyPayload(all []string, draining ...string) string {
	var hs []string
	for _, a := range all {
		ap := netip.MustParseAddrPort(a)
		st := "HEALTHY"
		if contains(draining, a) {
			st = "DRAINING"
		}
		hs = append(hs, fmt.Sprintf(`{"address":{"socket_address":{"address":"%s","port_value":%d}},"health_status":{"eds_health_status":%q}}`, ap.Addr(), ap.Port(), st))
	}
	return `{"cluster_statuses":[{"name":"epwindow/epwindow-probe/80/abc","host_statuses":[` + strings.Join(hs, ",") + `]}]}`
}

// serverIndex finds the replica's server (removals are sorted by name).
func serverIndex(t *testing.T, srv []*payloadServer, replica string) int {
	t.Helper()
	for i, s := range srv {
		if s.URL == replica {
			return i
		}
	}
	t.Fatalf("removal for unknown replica %s", replica)
	return -1
}

// waitPoll waits for the snapshot after next.
func waitPoll(t *testing.T, next <-chan struct{}) {
	t.Helper()
	select {
	case <-next:
	case <-time.After(20 * time.Second):
		t.Fatal("no poll within 20 s of the tick")
	}
}

// TestPollingRemovalWithinOneInterval runs each HTTP observer's Tracker
// against two local replicas on a fake clock. Replica r0 withdraws the
// address at 2.3 intervals, r1 at 4.7. Readings are stamped on the fake
// clock, which stands still while a poll is in flight, so the poll after the
// change is stamped exactly at the next tick: upstream_removed must land in
// (change, change + interval], with upstream_last_present the tick before —
// the tolerance is exactly the poll interval, nothing more.
func TestPollingRemovalWithinOneInterval(t *testing.T) {
	const keep, drop = "10.244.0.6:8080", "10.244.0.5:8080"
	for _, tc := range []struct {
		kind          string
		before, after string
		wantAccept    string
	}{
		{KindNginx, nginxPayload(drop, keep), nginxPayload(keep), "/configuration/backends "},
		{KindSkipper, skipperPayload(drop, keep), skipperPayload(keep), "/routes?limit=1000000 application/json"},
		// Traefik is read by exact service name (every name gets this
		// fake's one service; TestTraefikByName serves them apart).
		{KindTraefik, traefikServicePayload([]string{drop, keep}), traefikServicePayload([]string{drop, keep}, drop), "/api/http/services/epwindow-epwindow-probe-80@kubernetes "},
		{KindEnvoy, envoyPayload([]string{drop, keep}), envoyPayload([]string{drop, keep}, drop), "/clusters?format=json "},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			const iv = time.Second
			fc := clocktesting.NewFakeClock(t0)
			srv := []*payloadServer{newPayloadServer(t, fc, tc.before), newPayloadServer(t, fc, tc.before)}
			obs, choice, err := New(context.Background(), tc.kind, Deps{Clock: fc}, probeTarget,
				Options{Interval: iv, URLs: []string{srv[0].URL, srv[1].URL}})
			if err != nil {
				t.Fatal(err)
			}
			defer obs.Close()
			if choice.Kind != tc.kind || obs.Name() != tc.kind || obs.Resolution() != iv {
				t.Fatalf("choice %v, observer %s/%v", choice, obs.Name(), obs.Resolution())
			}
			tr := NewTracker(obs, fc, 10*time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			_, next := tr.Latest()
			go func() { done <- tr.Run(ctx) }()
			waitPoll(t, next)

			changes := []time.Duration{2300 * time.Millisecond, 4700 * time.Millisecond}
			changedAt := make([]time.Time, len(changes))
			for tick := 1; tick <= 7; tick++ {
				tickAt := t0.Add(time.Duration(tick) * iv)
				for i, c := range changes {
					if ch := t0.Add(c); ch.After(fc.Now()) && !ch.After(tickAt) && ch.Before(tickAt) {
						fc.SetTime(ch)
						changedAt[i], _ = srv[i].set(tc.after)
					}
				}
				_, next := tr.Latest()
				fc.SetTime(tickAt)
				waitPoll(t, next)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			if ok, why := tr.Steady(aps(keep)); !ok {
				t.Errorf("the kept address should be steady: %s", why)
			}
			if ok, why := tr.Gone(netip.MustParseAddrPort(drop)); !ok {
				t.Errorf("the dropped address should be gone: %s", why)
			}
			rs := tr.Removals(netip.MustParseAddrPort(drop))
			if len(rs) != 2 {
				t.Fatalf("want one removal per replica, got %+v", rs)
			}
			for _, r := range rs {
				i := serverIndex(t, srv, r.Replica)
				c := changedAt[i]
				if r.Invalid() != "" {
					t.Errorf("removal %s: invalid %q", r.Replica, r.Invalid())
				}
				from, to := r.Bracket()
				if !from.Before(c) || to.Before(c) {
					t.Errorf("%s: bracket [%v, %v] does not contain the change at %v", r.Replica, from, to, c)
				}
				if lag := r.Removed.At.Sub(c); lag <= 0 || lag > iv {
					t.Errorf("%s: removed %v after the change, want within one interval (%v)", r.Replica, lag, iv)
				}
				if r.Removed.At.Sub(r.LastPresent.At) != iv {
					t.Errorf("%s: last present %v, removed %v: want consecutive polls", r.Replica, r.LastPresent.At, r.Removed.At)
				}
			}
			srv[0].mu.Lock()
			accept := srv[0].accepts[0]
			srv[0].mu.Unlock()
			if accept != tc.wantAccept {
				t.Errorf("request %q, want %q", accept, tc.wantAccept)
			}
		})
	}
}

// TestPollingRealClock runs the nginx observer on the real clock against two
// replicas that change at real instants. No tolerance is needed: the server
// logs which payload version each request got, and upstream_removed must be
// exactly the first poll that got the new version, its last_present the
// poll before, and the bracket must contain the change.
func TestPollingRealClock(t *testing.T) {
	const iv = 50 * time.Millisecond
	clk := clock.RealClock{}
	srv := []*payloadServer{
		newPayloadServer(t, clk, nginxPayload("10.244.0.5:8080", "10.244.0.6:8080")),
		newPayloadServer(t, clk, nginxPayload("10.244.0.5:8080", "10.244.0.6:8080")),
	}
	obs, _, err := New(context.Background(), KindNginx, Deps{Clock: clk}, probeTarget,
		Options{Interval: iv, URLs: []string{srv[0].URL, srv[1].URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	tr := NewTracker(obs, clk, 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	addr := netip.MustParseAddrPort("10.244.0.5:8080")
	steady := func() bool { ok, _ := tr.Steady([]netip.AddrPort{addr}); return ok }
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := tr.WaitFor(wctx, steady); err != nil {
		t.Fatalf("never steady: %v", err)
	}
	var before, after [2]time.Time
	for i, s := range srv {
		// a few polls apart, so the replicas' removals differ
		_, next := tr.Latest()
		waitPoll(t, next)
		_, next = tr.Latest()
		waitPoll(t, next)
		before[i], after[i] = s.set(nginxPayload("10.244.0.6:8080"))
	}
	gone := func() bool { ok, _ := tr.Gone(addr); return ok }
	if err := tr.WaitFor(wctx, gone); err != nil {
		t.Fatalf("never gone: %v", err)
	}
	cancel()
	<-done

	rs := tr.Removals(addr)
	if len(rs) != 2 {
		t.Fatalf("want two removals, got %+v", rs)
	}
	for _, r := range rs {
		i := serverIndex(t, srv, r.Replica)
		s := srv[i]
		s.mu.Lock()
		log := append([]served(nil), s.log...)
		s.mu.Unlock()
		// first request served the new version, and the one before it
		first := -1
		for j, l := range log {
			if l.version == 1 {
				first = j
				break
			}
		}
		if first < 1 {
			t.Fatalf("%s: server log %v has no change after a first poll", r.Replica, log)
		}
		newAt, oldAt := log[first].at, log[first-1].at
		if r.Removed.Sent.After(newAt) || r.Removed.At.Before(newAt) {
			t.Errorf("%s: removed reading [%v, %v] is not the first poll of the new payload (served %v)", r.Replica, r.Removed.Sent, r.Removed.At, newAt)
		}
		if r.LastPresent.Sent.After(oldAt) || r.LastPresent.At.Before(oldAt) {
			t.Errorf("%s: last-present reading [%v, %v] is not the last poll of the old payload (served %v)", r.Replica, r.LastPresent.Sent, r.LastPresent.At, oldAt)
		}
		from, to := r.Bracket()
		if !from.Before(after[i]) || to.Before(before[i]) {
			t.Errorf("%s: bracket [%v, %v] misses the change [%v, %v]", r.Replica, from, to, before[i], after[i])
		}
		if r.Invalid() != "" {
			t.Errorf("%s: %s", r.Replica, r.Invalid())
		}
	}
}

// TestPollingBlindReplica: a replica that stops answering is blind, never
// removed, and its trial is marked.
func TestPollingBlindReplica(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	up := newPayloadServer(t, fc, nginxPayload("10.244.0.5:8080"))
	down := newPayloadServer(t, fc, nginxPayload("10.244.0.5:8080"))
	obs, _, err := New(context.Background(), KindNginx, Deps{Clock: fc}, probeTarget,
		Options{Interval: time.Second, URLs: []string{up.URL, down.URL}})
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(obs, fc, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, next := tr.Latest()
	go tr.Run(ctx)
	waitPoll(t, next)
	down.Close()
	for tick := 1; tick <= 3; tick++ {
		_, next := tr.Latest()
		fc.SetTime(t0.Add(time.Duration(tick) * time.Second))
		waitPoll(t, next)
	}
	rs := tr.Removals(netip.MustParseAddrPort("10.244.0.5:8080"))
	if len(rs) != 2 {
		t.Fatalf("got %+v", rs)
	}
	var blind Removal
	for _, r := range rs {
		if r.Replica == down.URL {
			blind = r
		}
	}
	if blind.Done() || blind.Blind != 3 || !strings.Contains(blind.Invalid(), down.URL) || !strings.Contains(blind.Invalid(), "could not be seen") {
		t.Errorf("blind replica: %+v, invalid %q", blind, blind.Invalid())
	}
}

// TestCmdObserver runs --upstreams-cmd polls on a fake clock: the command's
// output changes between ticks; a failing or hanging command is blind.
func TestCmdObserver(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "targets")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10.244.0.5\t8080\n10.244.0.6\t8080\n")
	fc := clocktesting.NewFakeClock(t0)
	obs, choice, err := New(context.Background(), KindAuto, Deps{Clock: fc}, probeTarget,
		Options{Interval: time.Second, Command: "cat " + file})
	if err != nil {
		t.Fatal(err)
	}
	if choice.Kind != KindCmd || obs.Name() != KindCmd {
		t.Fatalf("auto with --upstreams-cmd picked %v", choice)
	}
	tr := NewTracker(obs, fc, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, next := tr.Latest()
	go tr.Run(ctx)
	waitPoll(t, next)
	_, next = tr.Latest()
	fc.SetTime(t0.Add(time.Second))
	waitPoll(t, next)
	fc.SetTime(t0.Add(1500 * time.Millisecond))
	write("10.244.0.6:8080\n")
	_, next = tr.Latest()
	fc.SetTime(t0.Add(2 * time.Second))
	waitPoll(t, next)
	rs := tr.Removals(netip.MustParseAddrPort("10.244.0.5:8080"))
	if len(rs) != 1 || !rs[0].Done() || rs[0].Removed.At != t0.Add(2*time.Second) || rs[0].LastPresent.At != t0.Add(time.Second) {
		t.Fatalf("got %+v", rs)
	}

	for _, tc := range []struct{ name, cmd, want string }{
		{"fails", "echo no credentials >&2; exit 3", "no credentials"},
		{"hangs", "sleep 30", "did not finish within"},
		{"bad output", "echo hello", "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &cmdObserver{command: tc.cmd, timeout: 300 * time.Millisecond, interval: time.Second, clock: clock.RealClock{}}
			s, err := o.Poll(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Replicas) != 1 || s.Replicas[0].Err == nil || !strings.Contains(s.Replicas[0].Err.Error(), tc.want) ||
				!strings.Contains(s.Replicas[0].Err.Error(), "--"+FlagUpstreamsCmd) {
				t.Errorf("got %+v, want an error naming --%s and containing %q", s.Replicas, FlagUpstreamsCmd, tc.want)
			}
		})
	}
}
