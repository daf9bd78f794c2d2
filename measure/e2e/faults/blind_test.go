package faults

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// The modes of the observer's proxy.
const (
	forward   = iota // pass the request to Skipper
	answer503        // answer 503 Service Unavailable
	hangUp           // close the connection without an answer
)

// blindingProxy stands between the Skipper observer and Skipper's route
// table; the test switches it from forwarding to failing and back.
type blindingProxy struct {
	*httptest.Server
	mode   atomic.Int32
	failed atomic.Int32 // requests answered with a failure
}

func newBlindingProxy(t *testing.T) *blindingProxy {
	t.Helper()
	target, err := url.Parse(cluster.RoutesURL)
	if err != nil {
		t.Fatal(err)
	}
	target.Path = ""
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &blindingProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p.mode.Load() {
		case answer503:
			p.failed.Add(1)
			http.Error(w, "route table unavailable (blinded by the test)", http.StatusServiceUnavailable)
		case hangUp:
			p.failed.Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

// routesURL is the URL the observer reads, as --observer-url would name it.
func (p *blindingProxy) routesURL() string { return p.URL + "/routes" }

// blindFor switches to mode for d, then back to forwarding.
func (p *blindingProxy) blindFor(mode int32, d time.Duration) {
	p.mode.Store(mode)
	time.AfterFunc(d, func() { p.mode.Store(forward) })
}

// blindWindow is how long the observer stays blind in a trial. It starts
// right after the trial's DELETE is answered, while Skipper still lists the
// address (it polls the API every second, then the observer every 200 ms),
// so every poll in it falls between the address's last listing and its
// removal; 4 s is 20 polls and outlasts Skipper's reaction, so the removal
// itself happens while the observer is blind.
const blindWindow = 4 * time.Second

// blindDuring returns a progress callback that blinds p, in the given mode,
// once per listed trial, from its first report after the DELETE.
func blindDuring(p *blindingProxy, modes map[int]int32) func(measure.Progress) {
	var mu sync.Mutex
	done := map[int]bool{}
	return func(pr measure.Progress) {
		mode, ok := modes[pr.Trial]
		if pr.Phase != "trial" || pr.Stage == "delete" || !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !done[pr.Trial] {
			done[pr.Trial] = true
			p.blindFor(mode, blindWindow)
		}
	}
}

// The Skipper observer goes blind mid-run: answering 503 during trial 2,
// hanging up during trial 4. Both trials are kept, marked invalid with a
// reason that names the observer replica; the run goes on and the other
// trials are valid. Bystander pods in another namespace, labelled as the
// run's, are left untouched all along (bystanders).
func TestObserverBlindMarksTrialsInvalid(t *testing.T) {
	p := newBlindingProxy(t)
	cfg := baseConfig(t)
	cfg.Trials = 5
	cfg.ObserverOptions.URLs = []string{p.routesURL()}
	checkBystanders := bystanders(t)
	sink, err := runMeasure(t, cfg, blindDuring(p, map[int]int32{2: answer503, 4: hangUp}))
	checkBystanders(sink, err)
	if err != nil {
		t.Fatalf("measure.Run with a blind observer: %v (the run should go on without --stop-on-blind-observer)", err)
	}
	if p.failed.Load() == 0 {
		t.Fatal("the proxy never failed a request: the observer was never blind")
	}
	if len(sink.Records) != cfg.Trials {
		t.Fatalf("%d trial records, want %d", len(sink.Records), cfg.Trials)
	}
	replica := "skipper/" + p.routesURL()
	for _, r := range sink.Records {
		t.Logf("trial %d: valid %v %s", r.Trial, r.Valid, r.InvalidReason())
		switch r.Trial {
		case 2, 4:
			if r.Valid {
				t.Errorf("trial %d: the observer was blind in it, yet it is valid", r.Trial)
			} else if !strings.Contains(r.InvalidReason(), replica) {
				t.Errorf("trial %d: invalid reason %q does not name the observer replica %s", r.Trial, r.InvalidReason(), replica)
			} else if !r.PointValid(results.PointWindow) || r.PointValid(results.StageUpstreamRemoved) {
				// A blind observer corrupts only the upstream stages.
				t.Errorf("trial %d (%s): window valid %v, upstream_removed valid %v; want only the upstream stages out",
					r.Trial, r.InvalidReason(), r.PointValid(results.PointWindow), r.PointValid(results.StageUpstreamRemoved))
			}
		default:
			if !r.Valid {
				t.Errorf("trial %d, with the observer seeing, invalid: %s", r.Trial, r.InvalidReason())
			}
		}
	}
	if ns, pods := leftovers(t); len(ns)+len(pods) > 0 {
		t.Errorf("left namespaces %v and probe pods %v", ns, pods)
	}
}

// With --stop-on-blind-observer the same fault ends the run after the
// affected trial, with an error that names the flag; the blind trial is
// still written (invalid) and the namespace is cleaned up.
func TestObserverBlindStopsOnFlag(t *testing.T) {
	p := newBlindingProxy(t)
	cfg := baseConfig(t)
	cfg.Trials = 3
	cfg.StopOnBlindObserver = true
	cfg.ObserverOptions.URLs = []string{p.routesURL()}
	sink, err := runMeasure(t, cfg, blindDuring(p, map[int]int32{2: answer503}))
	if err == nil {
		t.Fatalf("measure.Run with --stop-on-blind-observer went on past a blind observer (%d trials)", len(sink.Records))
	}
	t.Logf("run stopped: %v", err)
	if !strings.Contains(err.Error(), "--"+measure.FlagStopOnBlind) {
		t.Errorf("error %q does not name --%s", err, measure.FlagStopOnBlind)
	}
	if !strings.Contains(err.Error(), p.routesURL()) {
		t.Errorf("error %q does not name the observer replica %s", err, p.routesURL())
	}
	if len(sink.Records) != 2 {
		t.Fatalf("%d trial records, want 2 (the valid first, the blind second)", len(sink.Records))
	}
	if !sink.Records[0].Valid {
		t.Errorf("trial 1 invalid: %s", sink.Records[0].InvalidReason())
	}
	if sink.Records[1].Valid {
		t.Errorf("trial 2, blind, is valid")
	}
	if ns, pods := leftovers(t); len(ns)+len(pods) > 0 {
		t.Errorf("left namespaces %v and probe pods %v", ns, pods)
	}
}
