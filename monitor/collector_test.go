package monitor

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epwindow/epwindow/results"
)

// history is n copies of results' testdata run, 6 h apart.
func history(t *testing.T, n int) *results.Drift {
	t.Helper()
	var runs []results.HistoryRun
	for i := range n {
		f, err := os.Open("../results/testdata/run.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		file, err := results.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		shift := time.Duration(i) * 6 * time.Hour
		file.Header.StartedAt = file.Header.StartedAt.Add(shift)
		for j := range file.Trials {
			file.Trials[j].T0 = file.Trials[j].T0.Add(shift)
		}
		runs = append(runs, results.HistoryRun{Name: "run", File: file})
	}
	return results.DriftOf(runs, results.DriftOptions{})
}

// The metrics pass Prometheus' own naming lint (promlint: units, suffixes,
// help), and say what the history says: the recommendation of the newest
// runs pooled, the window histogram over their trials, the verdict one-hot.
func TestCollector(t *testing.T) {
	d := history(t, 8)
	c := NewCollector(Options{Documented: 4 * time.Second, RunEvery: 6 * time.Hour, Since: time.Now()})
	c.Update(d, Read{})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	s := d.WindowSummary()
	r := s.Doc().Recommendation
	if r == nil {
		t.Fatal("no recommendation from the pooled runs")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	w, _ := s.Dist(results.PointWindow)
	want := `
# HELP epwindow_recommended_prestop_seconds The preStop sleep the newest runs recommend.
# TYPE epwindow_recommended_prestop_seconds gauge
epwindow_recommended_prestop_seconds ` + strconv.FormatInt(r.PreStopSeconds, 10) + `
# HELP epwindow_documented_prestop_seconds The preStop the platform documents (--documented-prestop), for alerting when the recommended preStop exceeds it.
# TYPE epwindow_documented_prestop_seconds gauge
epwindow_documented_prestop_seconds 4
# HELP epwindow_drift_verdict The newest run's drift verdict on the window against the pooled baseline: 1 for the verdict it got.
# TYPE epwindow_drift_verdict gauge
epwindow_drift_verdict{verdict="better"} 0
epwindow_drift_verdict{verdict="not_judged"} 0
epwindow_drift_verdict{verdict="same"} 1
epwindow_drift_verdict{verdict="suspect"} 0
epwindow_drift_verdict{verdict="worse"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "epwindow_recommended_prestop_seconds",
		"epwindow_documented_prestop_seconds", "epwindow_drift_verdict"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "epwindow_stage_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == results.PointWindow && int(m.GetHistogram().GetSampleCount()) != w.N {
				t.Errorf("window histogram counts %d trials, the pooled runs have %d", m.GetHistogram().GetSampleCount(), w.N)
			}
		}
	}
}

// The run's own cost comes from the newest run that wrote its summary: a
// run still going (no summary yet) does not blank it.
func TestCollectorRunCost(t *testing.T) {
	d := history(t, 3)
	finished := d.Runs[1].File
	if finished.Summary == nil {
		finished.Summary = &results.SummaryDoc{}
	}
	finished.Summary.Cost = &results.RunCost{APIRequests: 384, Watches: 2, Lists: 2, Writes: 53,
		ElapsedNS: int64(65 * time.Second), PeakRSSBytes: 70 << 20, CPUNS: int64(3 * time.Second)}
	d.Runs[2].File.Summary = nil // the newest, still going
	c := NewCollector(Options{})
	c.Update(d, Read{})
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
	want := `
# HELP epwindow_run_api_requests API requests the newest finished run sent, by kind (watch, list, write, other: plain reads).
# TYPE epwindow_run_api_requests gauge
epwindow_run_api_requests{kind="list"} 2
epwindow_run_api_requests{kind="other"} 327
epwindow_run_api_requests{kind="watch"} 2
epwindow_run_api_requests{kind="write"} 53
# HELP epwindow_run_duration_seconds How long the newest finished run took.
# TYPE epwindow_run_duration_seconds gauge
epwindow_run_duration_seconds 65
# HELP epwindow_run_peak_rss_bytes The newest finished run's peak resident memory.
# TYPE epwindow_run_peak_rss_bytes gauge
epwindow_run_peak_rss_bytes 7.340032e+07
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "epwindow_run_api_requests", "epwindow_run_duration_seconds", "epwindow_run_peak_rss_bytes"); err != nil {
		t.Error(err)
	}
}

// A schedule that stops measuring is seen: the newest trial's time (the
// largest deletion time of the newest run with trials, not that run's
// start), or the server's start while the history has no trial, beside the
// schedule's longest gap.
func TestCollectorLastTrial(t *testing.T) {
	d := history(t, 3)
	var newest time.Time
	for _, r := range d.Runs[2].File.Trials {
		if r.T0.After(newest) {
			newest = r.T0
		}
	}
	if !newest.After(d.Runs[2].File.Header.StartedAt) {
		t.Fatal("the newest run's trials do not come after its start")
	}
	since := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	want := func(last time.Time) string {
		return fmt.Sprintf(`
# HELP epwindow_expected_run_interval_seconds The longest time the schedule leaves between two runs (--expect-run-every), for alerting when it stops measuring.
# TYPE epwindow_expected_run_interval_seconds gauge
epwindow_expected_run_interval_seconds 21600
# HELP epwindow_last_trial_timestamp_seconds When the history's newest trial that measured the window deleted its pod, in seconds since the epoch; before the first, when this server started.
# TYPE epwindow_last_trial_timestamp_seconds gauge
epwindow_last_trial_timestamp_seconds %s
`, strconv.FormatFloat(float64(last.UnixNano())/1e9, 'g', -1, 64))
	}
	c := NewCollector(Options{RunEvery: 6 * time.Hour, Since: since})
	// A run just started (header only), and one whose trials measured no
	// window (all invalid), keep the newest trial where it was.
	blind := &results.File{Header: d.Runs[2].File.Header}
	for _, r := range d.Runs[2].File.Trials {
		r.T0 = r.T0.Add(time.Hour)
		r.Valid, r.Reasons = false, []results.Reason{{Code: results.ReasonObserverBlind}}
		r.Stages = nil // no stage seen: no window
		blind.Trials = append(blind.Trials, r)
	}
	d.Runs = append(d.Runs, results.HistoryRun{Name: "blind", File: blind},
		results.HistoryRun{Name: "started", File: &results.File{Header: d.Runs[2].File.Header}})
	c.Update(d, Read{})
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(newest)), "epwindow_expected_run_interval_seconds", "epwindow_last_trial_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	c.Update(results.DriftOf(nil, results.DriftOptions{}), Read{})
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(since)), "epwindow_expected_run_interval_seconds", "epwindow_last_trial_timestamp_seconds"); err != nil {
		t.Errorf("an empty history: %v", err)
	}
}

// How old the served state is, and what the last read left out: the
// time of the last read that succeeded (a failed one does not move it, and
// is counted), the skipped files by reason, every reason present, and the
// refresh period the alert on a stale state compares the age with.
func TestCollectorReadHealth(t *testing.T) {
	c := NewCollector(Options{Refresh: time.Minute})
	want := func(at string, skipped map[string]int, errs int) string {
		s := fmt.Sprintf(`
# HELP epwindow_history_read_errors_total Reads of the history that failed as a whole (its folder missing or unreadable); the metrics stay the last read's.
# TYPE epwindow_history_read_errors_total counter
epwindow_history_read_errors_total %d
# HELP epwindow_history_refresh_interval_seconds How often the history is read again (--refresh), for alerting when the last read is too old.
# TYPE epwindow_history_refresh_interval_seconds gauge
epwindow_history_refresh_interval_seconds 60
`, errs)
		if at == "" {
			return s
		}
		s += `# HELP epwindow_history_last_read_success_timestamp_seconds When the history was last read whole, in seconds since the epoch: every other metric is as of then.
# TYPE epwindow_history_last_read_success_timestamp_seconds gauge
epwindow_history_last_read_success_timestamp_seconds ` + at + `
# HELP epwindow_history_skipped_files Files of the history the last read skipped, by reason: empty (no header yet), invalid (not a run's results), unreadable, future (started after the read, beyond the tolerance: a wrong clock), duplicate (a copy of a run read once).
# TYPE epwindow_history_skipped_files gauge
`
		for _, r := range []string{"duplicate", "empty", "future", "invalid", "unreadable"} {
			s += fmt.Sprintf("epwindow_history_skipped_files{reason=%q} %d\n", r, skipped[r])
		}
		return s
	}
	names := []string{"epwindow_history_read_errors_total", "epwindow_history_refresh_interval_seconds",
		"epwindow_history_last_read_success_timestamp_seconds", "epwindow_history_skipped_files"}
	// Before the first read: no read time (a server that never read is
	// stale by the absence alert's measure, not this one's).
	if err := testutil.CollectAndCompare(c, strings.NewReader(want("", nil, 0)), names...); err != nil {
		t.Errorf("before a read: %v", err)
	}
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	skipped := map[string]int{SkipFuture: 1, SkipDuplicate: 11}
	c.Update(history(t, 2), Read{At: at, Skipped: skipped})
	c.ReadFailed()
	c.ReadFailed()
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(strconv.FormatFloat(float64(at.Unix()), 'g', -1, 64), skipped, 2)), names...); err != nil {
		t.Errorf("after a read and two failed: %v", err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
	// A read that found the runs unchanged: a new time and skips, the
	// history's metrics as they were.
	later, none := at.Add(time.Minute), map[string]int{}
	c.Reread(Read{At: later, Skipped: none})
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(strconv.FormatFloat(float64(later.Unix()), 'g', -1, 64), none, 2)), names...); err != nil {
		t.Errorf("after a read of the same runs: %v", err)
	}
	if n := testutil.CollectAndCount(c, "epwindow_history_runs"); n != 1 {
		t.Errorf("after a read of the same runs epwindow_history_runs is exported %d times, want the history kept", n)
	}
}
