package faults

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// freezeFor stops pid (SIGSTOP) for d, then resumes it (SIGCONT). It
// returns when the process runs again.
func freezeFor(t *testing.T, pid int, d time.Duration) (from, to time.Time, err error) {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("SIGSTOP %d: %w", pid, err)
	}
	from = time.Now()
	time.Sleep(d) // the outage itself: nothing to wait for but the clock
	to = time.Now()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return from, to, fmt.Errorf("SIGCONT %d: %w", pid, err)
	}
	return from, to, nil
}

// A control-plane outage in the middle of a trial: the whole control plane
// (etcd, API server, controllers — and the node agent, which lives in the
// same process) is frozen with SIGSTOP for 15 s once trial 2 has seen its
// pod terminating, then resumed. The run goes on; trial 2 is kept with the
// reason that the API server did not answer (measure's heartbeat), which
// marks only its watch-stamped stages: its window and the recommendation's
// input (traffic end − prestop_called, both on the probe's clock) stay in
// the summary. Trials 3 and 4, after the outage, are valid.
func TestControlPlaneFreezeMidTrial(t *testing.T) {
	pid := cluster.PID
	// Whatever happens, the cluster must not stay frozen for the next test.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	const outage = 15 * time.Second
	cfg := baseConfig(t)
	cfg.Trials = 4
	var (
		once     sync.Once
		started  = make(chan struct{})
		frozen   = make(chan struct{})
		from, to time.Time
		fErr     error
	)
	sink, err := runMeasure(t, cfg, func(p measure.Progress) {
		// Mid-trial: trial 2's DELETE has been answered (its first report
		// after "delete"); the node agent, the EndpointSlice controller and
		// Skipper have yet to react. The callback must not block: freeze in
		// a goroutine.
		if p.Phase == "trial" && p.Trial == 2 && p.Stage != "delete" {
			once.Do(func() {
				close(started)
				go func() {
					defer close(frozen)
					from, to, fErr = freezeFor(t, pid, outage)
				}()
			})
		}
	})
	select {
	case <-started:
	default:
		t.Fatalf("trial 2 never began: the control plane was never frozen (run error: %v)", err)
	}
	<-frozen
	if fErr != nil {
		t.Fatal(fErr)
	}
	t.Logf("control plane (pid %d) frozen %s – %s", pid, from.Format("15:04:05.000"), to.Format("15:04:05.000"))
	if err != nil {
		t.Fatalf("measure.Run after a %s control-plane outage: %v (the run should go on)", outage, err)
	}
	if len(sink.Records) != cfg.Trials {
		t.Fatalf("%d trial records, want %d", len(sink.Records), cfg.Trials)
	}
	for _, r := range sink.Records {
		t.Logf("trial %d: valid %v %s", r.Trial, r.Valid, r.InvalidReason())
	}
	r2 := sink.Records[1]
	if r2.Valid {
		t.Errorf("trial 2 overlapped a %s outage but is valid", outage)
	} else if !strings.Contains(r2.InvalidReason(), results.ReasonAPIServerStall+": the API server did not answer") {
		t.Errorf("trial 2 invalid for another reason: %q; want the API server's silence named", r2.InvalidReason())
	}
	// Only the watch stages are marked: every reason of trial 2 is one the
	// watch stages carry, and the probe-clock stages stand.
	for _, rs := range r2.ReasonList() {
		if stages, all := results.ReasonStages(rs.Code); all || !slices.Contains(stages, results.StageSliceNotReady) {
			t.Errorf("trial 2 reason %s marks more than the watch stages (%v)", rs, stages)
		}
	}
	if !r2.PointValid(results.PointWindow) || !r2.PointValid(results.StagePrestopCalled) || r2.PointValid(results.StagePodTerminatingSeen) {
		t.Errorf("trial 2: window valid %v, prestop_called valid %v, pod_terminating_seen valid %v; want true, true, false",
			r2.PointValid(results.PointWindow), r2.PointValid(results.StagePrestopCalled), r2.PointValid(results.StagePodTerminatingSeen))
	}
	sum := results.NewSummary(sink.Meta, results.Options{})
	for _, r := range sink.Records {
		sum.Add(r)
	}
	sum.Close()
	_, windowTrials := sum.Samples(results.PointWindow)
	_, coverTrials := sum.Samples(results.Delta{From: results.StagePrestopCalled, To: results.PointWindow}.Name())
	_, sliceTrials := sum.Samples(results.StageSliceNotReady)
	if !slices.Contains(windowTrials, 2) || !slices.Contains(coverTrials, 2) || slices.Contains(sliceTrials, 2) {
		t.Errorf("summary: window from trials %v, prestop_called→window from %v, slice_not_ready from %v; want trial 2 in the first two only",
			windowTrials, coverTrials, sliceTrials)
	}
	if rec := sum.Doc().Recommendation; rec == nil || rec.N != len(coverTrials) {
		t.Errorf("recommendation %+v: want it over the %d trials with a valid cover, trial 2 included", rec, len(coverTrials))
	}
	for _, r := range sink.Records[2:] {
		if !r.Valid {
			t.Errorf("trial %d, after the outage, invalid: %s", r.Trial, r.InvalidReason())
		}
		if !r.T0.After(to) {
			t.Errorf("trial %d began at %s, before the outage ended at %s", r.Trial, r.T0, to)
		}
	}
	if _, err := results.Decode(bytes.NewReader(sink.Encoded.Bytes())); err != nil {
		t.Errorf("results stream does not decode: %v", err)
	}
	if ns, pods := leftovers(t); len(ns)+len(pods) > 0 {
		t.Errorf("left namespaces %v and probe pods %v", ns, pods)
	}
}
