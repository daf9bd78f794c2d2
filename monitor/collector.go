package monitor

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/epwindow/epwindow/results"
)

// StageBuckets are the histogram buckets of the stage durations, in
// seconds: a propagation window is tens of milliseconds to a minute (the
// default hold), and a poll-driven controller's lands in whole seconds.
var StageBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120}

// Verdicts are the values of the drift verdict's label, one of them 1:
// "suspect" while a screen's finding is confirming (no alarm: the alert
// is on "worse", a confirmed change).
var Verdicts = []string{"worse", "suspect", "same", "better", "not_judged"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("epwindow_"+name, help, labels, nil)
}

var (
	descStage = desc("stage_seconds",
		"Offset of each stage from the deletion, over the trials of the newest runs the drift test pools (a trial cut at the hold counts at its seen value).", "stage")
	descPreStop  = desc("recommended_prestop_seconds", "The preStop sleep the newest runs recommend.")
	descGrace    = desc("recommended_termination_grace_period_seconds", "The terminationGracePeriodSeconds the newest runs recommend.")
	descBound    = desc("window_bound_seconds", "Upper confidence bound of the window the preStop covers (traffic end after the preStop call), from the newest runs.")
	descCovers   = desc("window_bound_covers", "The share of deletions the window bound covers, at the confidence of epwindow_window_bound_confidence (below the asked quantile when the runs are too few).")
	descConf     = desc("window_bound_confidence", "The confidence of the window bound.")
	descFloor    = desc("window_bound_is_floor", "1 when the window bound fell on a trial cut at the hold: it and the recommendation are only floors.")
	descPreFloor = desc("recommended_prestop_is_floor", "1 when the recommended preStop is only a floor: the window's bound fell on a trial cut at the hold, or the DNS bound on one a DNS server still answered at its end.")
	descCensored = desc("censored_trials", "Trials of the newest runs cut at the hold.")
	descTrials   = desc("window_trials", "Trials of the newest runs pooled against the baseline (the window side).")
	descBase     = desc("baseline_trials", "Trials in the pooled baseline the newest runs were compared with.")
	descVerdict  = desc("drift_verdict", "The newest run's drift verdict on the window against the pooled baseline: 1 for the verdict it got.", "verdict")
	descHeld     = desc("drift_baseline_held", "1 when the baseline is held before an earlier run judged worse.")
	descDoc      = desc("documented_prestop_seconds", "The preStop the platform documents (--documented-prestop), for alerting when the recommended preStop exceeds it.")
	descLastRun  = desc("last_run_start_timestamp_seconds", "When the newest run started, in seconds since the epoch.")
	descLastT    = desc("last_trial_timestamp_seconds", "When the history's newest trial that measured the window deleted its pod, in seconds since the epoch; before the first, when this server started.")
	descEvery    = desc("expected_run_interval_seconds", "The longest time the schedule leaves between two runs (--expect-run-every), for alerting when it stops measuring.")
	descRuns     = desc("history_runs", "Runs in the history, all segments.")
	descSegRuns  = desc("segment_runs", "Runs since the settings that shape the window last changed.")
	descObsBytes = desc("observer_read_bytes_per_minute", "Bytes the newest run read per minute from an observed controller (the run's own cost).", "observer")
	// The run's own cost, from the newest run that wrote its summary.
	descCostAPI  = desc("run_api_requests", "API requests the newest finished run sent, by kind (watch, list, write, other: plain reads).", "kind")
	descCostTime = desc("run_duration_seconds", "How long the newest finished run took.")
	descCostRSS  = desc("run_peak_rss_bytes", "The newest finished run's peak resident memory.")
	descCostCPU  = desc("run_cpu_seconds", "CPU time the newest finished run used.")
	// The health of the reads of the history: what the numbers above are
	// as of.
	descReadOK    = desc("history_last_read_success_timestamp_seconds", "When the history was last read whole, in seconds since the epoch: every other metric is as of then.")
	descReadErrs  = desc("history_read_errors_total", "Reads of the history that failed as a whole (its folder missing or unreadable); the metrics stay the last read's.")
	descSkipped   = desc("history_skipped_files", "Files of the history the last read skipped, by reason: empty (no header yet), invalid (not a run's results), unreadable, future (started after the read, beyond the tolerance: a wrong clock), duplicate (a copy of a run read once).", "reason")
	descRefreshed = desc("history_refresh_interval_seconds", "How often the history is read again (--refresh), for alerting when the last read is too old.")
)

// Reasons a read of the history skips a file: the values of
// epwindow_history_skipped_files' reason label, a fixed few.
const (
	// SkipEmpty: a zero-byte file, a run that has not written its header
	// (yet), or a full volume's.
	SkipEmpty = "empty"
	// SkipInvalid: not a run's results (no header, not JSON lines, a
	// malformed line).
	SkipInvalid = "invalid"
	// SkipUnreadable: the file could not be read (a permission).
	SkipUnreadable = "unreadable"
	// SkipFuture: a run that started after the read by more than the
	// tolerance: its node's clock is wrong.
	SkipFuture = "future"
	// SkipDuplicate: a copy of a run the read already holds.
	SkipDuplicate = "duplicate"
)

// SkipReasons are the reasons a file is skipped, each exported.
var SkipReasons = []string{SkipEmpty, SkipInvalid, SkipUnreadable, SkipFuture, SkipDuplicate}

// Options are what a Collector exports besides the history.
type Options struct {
	// Documented is the preStop the platform documents (0: not exported).
	Documented time.Duration
	// RunEvery is the longest time the schedule leaves between two runs
	// (0: not exported).
	RunEvery time.Duration
	// Since is when the server started: the newest trial's time while the
	// history has none, so that a schedule that never measures is seen.
	Since time.Time
	// Refresh is how often the history is read again (0: not exported).
	Refresh time.Duration
}

// Read is how a read of the history went, besides its runs.
type Read struct {
	// At is when the read was made.
	At time.Time
	// Skipped counts the files it skipped by reason (SkipReasons).
	Skipped map[string]int
}

// Collector is a prometheus.Collector of a history's newest state. Update
// replaces the state; scrapes read the last one, and how old it is.
type Collector struct {
	o Options

	mu         sync.Mutex
	metrics    []prometheus.Metric
	read       Read
	readErrors int
}

// NewCollector returns a Collector with no history yet.
func NewCollector(o Options) *Collector {
	return &Collector{o: o}
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStage, descPreStop, descGrace, descBound, descCovers, descConf, descFloor, descPreFloor,
		descCensored, descTrials, descBase, descVerdict, descHeld, descDoc, descLastRun, descLastT, descEvery, descRuns, descSegRuns, descObsBytes,
		descCostAPI, descCostTime, descCostRSS, descCostCPU, descReadOK, descReadErrs, descSkipped, descRefreshed} {
		ch <- d
	}
}

// Collect sends the metrics of the last Update.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.metrics {
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(descReadErrs, prometheus.CounterValue, float64(c.readErrors))
	if c.o.Refresh > 0 {
		ch <- prometheus.MustNewConstMetric(descRefreshed, prometheus.GaugeValue, c.o.Refresh.Seconds())
	}
	if c.read.At.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(descReadOK, prometheus.GaugeValue, unixSeconds(c.read.At))
	for _, r := range SkipReasons {
		ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.GaugeValue, float64(c.read.Skipped[r]), r)
	}
}

// Update replaces the state with history d, as read by r.
func (c *Collector) Update(d *results.Drift, r Read) {
	ms := Metrics(d, c.o)
	c.mu.Lock()
	c.metrics, c.read = ms, r
	c.mu.Unlock()
}

// Reread records a read of the history that found the runs of the last
// Update unchanged: the metrics stay, the read's time and skipped files
// are r's.
func (c *Collector) Reread(r Read) {
	c.mu.Lock()
	c.read = r
	c.mu.Unlock()
}

// ReadFailed counts a read of the history that failed as a whole; the
// state stays the last read's, and epwindow_history_last_read_success_timestamp_seconds
// ages.
func (c *Collector) ReadFailed() {
	c.mu.Lock()
	c.readErrors++
	c.mu.Unlock()
}

// Metrics are the metrics of history d.
func Metrics(d *results.Drift, o Options) []prometheus.Metric {
	var out []prometheus.Metric
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...))
	}
	if o.Documented > 0 {
		gauge(descDoc, o.Documented.Seconds())
	}
	if o.RunEvery > 0 {
		gauge(descEvery, o.RunEvery.Seconds())
	}
	if last := lastTrial(d.Runs); !last.IsZero() {
		gauge(descLastT, unixSeconds(last))
	} else if !o.Since.IsZero() {
		gauge(descLastT, unixSeconds(o.Since))
	}
	gauge(descRuns, float64(len(d.Runs)))
	if len(d.Segments) == 0 {
		return out
	}
	seg := d.Segments[len(d.Segments)-1]
	gauge(descSegRuns, float64(seg.Last-seg.First+1))
	l := d.Latest
	newest := d.Runs[l.Run].File.Header
	gauge(descLastRun, unixSeconds(newest.StartedAt))
	for _, o := range newest.Observers {
		if o.BytesPerMinute > 0 {
			gauge(descObsBytes, o.BytesPerMinute, o.Name)
		}
	}
	for i := len(d.Runs) - 1; i >= 0; i-- {
		if sum := d.Runs[i].File.Summary; sum != nil && sum.Cost != nil {
			c := sum.Cost
			for kind, n := range map[string]int64{"watch": c.Watches, "list": c.Lists, "write": c.Writes,
				"other": c.APIRequests - c.Watches - c.Lists - c.Writes} {
				gauge(descCostAPI, float64(n), kind)
			}
			gauge(descCostTime, time.Duration(c.ElapsedNS).Seconds())
			if c.PeakRSSBytes > 0 {
				gauge(descCostRSS, float64(c.PeakRSSBytes))
				gauge(descCostCPU, time.Duration(c.CPUNS).Seconds())
			}
			break
		}
	}
	verdict := "not_judged"
	switch l.Verdict {
	case results.Worse, results.Suspect, results.Same, results.Better:
		verdict = string(l.Verdict)
	}
	for _, v := range Verdicts {
		gauge(descVerdict, b2f(v == verdict), v)
	}
	gauge(descHeld, b2f(l.Frozen))
	gauge(descTrials, float64(l.WindowN))
	gauge(descBase, float64(l.BaselineN))

	s := d.WindowSummary()
	doc := s.Doc()
	gauge(descCensored, float64(doc.Censored))
	for _, name := range s.Metrics() {
		if !isStage(name) {
			continue
		}
		values, _ := s.Samples(name)
		out = append(out, histogram(name, values))
	}
	if r := doc.Recommendation; r != nil {
		gauge(descPreStop, float64(r.PreStopSeconds))
		gauge(descGrace, float64(r.GraceSeconds))
		gauge(descBound, time.Duration(r.CoverNS).Seconds())
		gauge(descCovers, r.Bound.Covers)
		gauge(descConf, r.Bound.Confidence)
		gauge(descFloor, b2f(r.Bound.LowerBound))
		gauge(descPreFloor, b2f(r.LowerBound()))
	}
	return out
}

// isStage reports whether a summary metric is a stage or the window (not
// a stage-to-stage delta, nor the 1 s cross-check server_delete_time,
// negative by construction): the histograms are per stage.
func isStage(name string) bool {
	if name == results.StageServerDeleteTime {
		return false
	}
	for _, p := range results.Points {
		if p == name {
			return true
		}
	}
	return false
}

// histogram is a constant histogram of values (nanoseconds) over
// StageBuckets.
func histogram(stage string, values []float64) prometheus.Metric {
	buckets := make(map[float64]uint64, len(StageBuckets))
	sum := 0.0
	for _, v := range values {
		sec := v / 1e9
		sum += sec
		for _, b := range StageBuckets {
			if sec <= b {
				buckets[b]++
			}
		}
	}
	return prometheus.MustNewConstHistogram(descStage, uint64(len(values)), sum, buckets, stage)
}

// lastTrial is when the newest trial of runs (oldest first) that measured
// the window deleted its pod (results.Record.MeasuredWindow, as the drift
// test counts them); zero when none did. Trials that measured nothing (an
// observer blind, a watch broken) are not counted: the numbers exported
// rest only on the others, and so does the alert on their age.
func lastTrial(runs []results.HistoryRun) time.Time {
	for i := len(runs) - 1; i >= 0; i-- {
		var last time.Time
		for j := range runs[i].File.Trials {
			r := &runs[i].File.Trials[j]
			if r.MeasuredWindow() && r.T0.After(last) {
				last = r.T0
			}
		}
		if !last.IsZero() {
			return last
		}
	}
	return time.Time{}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
