package results

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
)

// The drift test of a history, run after run, as a schedule left alone
// for months meets it. A test at every run over overlapping windows calls
// like runs worse far more often than its level says (the windows share
// most of their trials, so one unlucky stretch is tested a dozen times),
// and a held false alarm never ends; an alert that cries wolf once a month
// gets muted. So a change is alarmed only once two disjoint sets of trials
// say so (see step for the blocks and the reference):
//
//  1. Screen: the runs since the reference (a block, up to WindowTrials
//     trials), at each run, against the screen's half of the reference,
//     with compare's tests at the window's share (DriftScreenAlpha). A
//     screen that fires makes the run Suspect, not Worse: nothing is
//     alerted.
//  2. Confirm: the trials of the runs after the suspect one against the
//     other half of the reference: no trial on either side was read by the
//     screen, so given that a screen fired, a confirmation of like runs
//     fires with at most its own level. It looks when its trials reach
//     each quarter of WindowTrials, the looks sharing DriftConfirmAlpha by
//     quarters (a union bound, whatever their dependence). A look that
//     fires makes the run Worse: the alert. A confirmation that reaches
//     WindowTrials without firing clears the suspicion.
//  3. Hold and release: once Worse, every run stays Worse (the reference
//     held from before the change, so a lasting regression does not become
//     the new normal) until a release window, WindowTrials of trials after
//     the confirmation, is not worse than the whole held reference even at
//     the lenient DriftReleaseAlpha: a regression that lasts is kept with
//     that test's power (a +30 s slow mode in 10% of 120 deletions: 12
//     trials above the whole reference, p ≈ 1e-4), one that went away, or
//     a false alarm, is released, and the screen starts afresh.
//
// A false alarm of like runs needs a screen (about one a month at the
// default schedule and sizes) and then an independent confirmation: about
// their product a month. The seeded simulations in history_test.go give
// the rates per judged run and per 30-day history, and the delay until a
// slow mode is alarmed (docs/continuous.md).

// DriftOptions size the two sides of a drift comparison.
type DriftOptions struct {
	// BaselineTrials is how many trials the baseline pools (default
	// DefaultBaselineTrials); a run with fewer before it is not judged.
	BaselineTrials int
	// WindowTrials is the most trials the window side pools, newest runs
	// first (default DefaultWindowTrials); it also sizes a confirmation
	// and a release window.
	WindowTrials int
	Compare      CompareOptions
	// The levels of the screen, of a whole confirmation and of the release
	// test (0: DriftScreenAlpha, DriftConfirmAlpha, DriftReleaseAlpha).
	ScreenAlpha, ConfirmAlpha, ReleaseAlpha float64
}

// Defaults of DriftOptions: 120 trials a side catch a +30 s slow mode in
// 10% of deletions 9 times in 10 (docs/compare.md's power table).
const (
	DefaultBaselineTrials = 120
	DefaultWindowTrials   = 120
	// DriftScreenAlpha is the window's share of compare's family error.
	DriftScreenAlpha = FamilyError / 2
	// DriftConfirmAlpha is spent over DriftConfirmLooks looks.
	DriftConfirmAlpha = 0.025
	DriftConfirmLooks = 4
	// DriftReleaseAlpha is lenient on purpose: releasing a hold needs the
	// release window to be not worse even at this level.
	DriftReleaseAlpha = 0.2
	// DriftReferenceBaselines is how many BaselineTrials the reference
	// grows to: a larger one tells a slow mode from noise with fewer new
	// trials (a +30 s slow mode, 6 slow trials in 60: p ≈ (60/120)^6 ≈ 1.6%
	// against 60 reference trials, (60/240)^6 ≈ 0.02% against 180).
	DriftReferenceBaselines = 3
)

// Segment is a stretch of runs with one Settings.
type Segment struct {
	// First and Last index the history's runs.
	First, Last int
	Settings    Settings
	// Changes are what changed from the previous segment (none for the
	// first).
	Changes []string
}

// RunVerdict is one run's test within its segment.
type RunVerdict struct {
	Run int `json:"run"`
	// Window and Baseline index the runs each side of the run's test
	// pooled, oldest first: screening, the block (the runs since the
	// reference) and the screen's half of the reference; confirming, the
	// runs after the suspect one and the reference's other half; held, the
	// release window and the held reference; while the segment's first
	// runs fill the reference, no window and the reference so far.
	// WindowN and BaselineN count their trials that measured the window.
	Window    []int `json:"window_runs"`
	Baseline  []int `json:"baseline_runs"`
	WindowN   int   `json:"window_n"`
	BaselineN int   `json:"baseline_n"`
	// Verdict is the window metric's: Suspect while a screen's finding is
	// confirming, Worse from its confirmation until a release (NotJudged
	// while the segment's runs fill the reference: Need says how many
	// trials more it needs).
	Verdict Verdict `json:"verdict"`
	Need    int     `json:"need,omitempty"`
	// Frozen is set while the reference is held (confirming or held):
	// ChangeRun is the run whose screen fired, Confirmed the run whose
	// confirmation made it worse (0 before). ReleaseNeed is how many more
	// trials the release window needs; Cleared marks the run whose
	// confirmation found no change, Released the one whose release window
	// was like the baseline.
	Frozen      bool `json:"frozen,omitempty"`
	ChangeRun   int  `json:"change_run,omitempty"`
	Confirmed   int  `json:"confirmed_run,omitempty"`
	ReleaseNeed int  `json:"release_need,omitempty"`
	Cleared     bool `json:"cleared,omitempty"`
	Released    bool `json:"released,omitempty"`
	// Recent are the newest runs of the segment up to WindowTrials trials,
	// whatever the test: their own numbers follow. The upper bound of the
	// window the preStop covers (the recommendation's, at the run's
	// quantile and confidence; 0 without one), the share of deletions it
	// covers, set BoundFloor when it is only a floor; and the window's
	// median.
	Recent      []int   `json:"recent_runs"`
	BoundNS     int64   `json:"bound_ns,omitempty"`
	BoundCovers float64 `json:"bound_covers,omitempty"`
	BoundFloor  bool    `json:"bound_floor,omitempty"`
	WindowP50NS int64   `json:"window_p50_ns,omitempty"`
}

// Drift is a history's segments and the tests of its newest segment's
// runs; Latest is the newest run's, with its full comparison.
type Drift struct {
	Runs     []HistoryRun
	Segments []Segment
	Tests    []RunVerdict
	Latest   RunVerdict
	// Comparison is the newest run's test as a whole comparison (nil
	// when not judged).
	Comparison *Comparison
	// needs are the runs Needs names.
	needs []int
}

// WindowSummary is the newest runs of the newest segment (Recent) pooled
// and summarised (nil when the history is empty).
func (d *Drift) WindowSummary() *Summary {
	if len(d.Tests) == 0 {
		return nil
	}
	return pooled(d.Runs, d.Latest.Recent)
}

// Suspect is a drift verdict: the run's screen fired, and the trials after
// it are confirming (or clearing) the change; it raises no alarm.
const Suspect Verdict = "suspect"

// driftState is where the drift test stands after a run.
type driftState int

const (
	driftScreening driftState = iota
	driftConfirming
	driftHeld
)

// DriftOf segments runs (oldest first) and replays the newest segment's
// tests up to its newest run (see the top of this file).
func DriftOf(runs []HistoryRun, o DriftOptions) *Drift {
	o.BaselineTrials = cmp.Or(o.BaselineTrials, DefaultBaselineTrials)
	o.WindowTrials = cmp.Or(o.WindowTrials, DefaultWindowTrials)
	o.ScreenAlpha = cmp.Or(o.ScreenAlpha, DriftScreenAlpha)
	o.ConfirmAlpha = cmp.Or(o.ConfirmAlpha, DriftConfirmAlpha)
	o.ReleaseAlpha = cmp.Or(o.ReleaseAlpha, DriftReleaseAlpha)
	runs = uniqueRuns(runs)
	d := &Drift{Runs: runs, Segments: segmentsOf(runs)}
	if len(d.Segments) == 0 {
		return d
	}
	seg := d.Segments[len(d.Segments)-1]
	r := &replay{runs: runs, o: o, first: seg.First, samples: make([]*sample, len(runs)), covers: make([]*sample, len(runs))}
	for i := seg.First; i <= seg.Last; i++ {
		r.samples[i], r.covers[i] = windowSample(runs[i].File)
	}
	// The newest run with trials: a run that has timed no deletion yet
	// (a scheduled run just started, or one stopped before its first
	// trial) carries no evidence, and judging it would blank the bound
	// and the verdict until its first trial lands.
	newest := seg.Last
	for newest > seg.First && r.count(newest) == 0 {
		newest--
	}
	for j := seg.First; j <= seg.Last; j++ {
		if r.count(j) == 0 && j != newest {
			continue
		}
		v := r.step(j)
		v.Recent = r.newest(j, seg.First)
		r.figures(&v)
		d.Tests = append(d.Tests, v)
	}
	d.Latest = d.Tests[len(d.Tests)-1]
	need := map[int]bool{}
	for _, i := range r.ref {
		need[i] = true
	}
	if r.state != driftScreening {
		for _, i := range r.releaseBase {
			need[i] = true
		}
	}
	d.needs = slices.Sorted(maps.Keys(need))
	if l := d.Latest; l.Verdict != NotJudged && l.BaselineN > 0 && l.WindowN > 0 {
		d.Comparison = Compare(pooled(runs, l.Baseline), pooled(runs, l.Window), o.Compare)
	}
	return d
}

// uniqueRuns is runs with each run once: two files with the same header
// (its start to the nanosecond, cluster, settings and flags: a copied file)
// are one run, pooled once, the one with more trials kept (a copy taken
// while the run went on lacks its last ones). Twelve copies of a run with
// one slow trial in ten would otherwise pool as twelve runs and read as a
// slow mode. (history's loader drops copies first and warns; this keeps
// any caller of DriftOf from pooling one twice.)
func uniqueRuns(runs []HistoryRun) []HistoryRun {
	seen := map[string]int{}
	out := make([]HistoryRun, 0, len(runs))
	for _, r := range runs {
		key := ""
		if r.File.Header != nil {
			if b, err := json.Marshal(r.File.Header); err == nil {
				key = string(b)
			}
		}
		if i, dup := seen[key]; dup && key != "" {
			if len(r.File.Trials) > len(out[i].File.Trials) {
				out[i] = r
			}
			continue
		}
		seen[key] = len(out)
		out = append(out, r)
	}
	return out
}

// segmentsOf splits runs where their Settings change.
func segmentsOf(runs []HistoryRun) []Segment {
	var segs []Segment
	for i, r := range runs {
		s := SettingsOf(r.File.Header)
		if n := len(segs); n > 0 && slices.Equal(segs[n-1].Settings, s) {
			segs[n-1].Last = i
			continue
		}
		seg := Segment{First: i, Last: i, Settings: s}
		if n := len(segs); n > 0 {
			seg.Changes = s.Changes(segs[n-1].Settings)
		}
		segs = append(segs, seg)
	}
	return segs
}

// replay carries the drift test's state from run to run of one segment.
type replay struct {
	runs    []HistoryRun
	o       DriftOptions
	first   int       // the segment's first run
	samples []*sample // each run's window values
	covers  []*sample // each run's covered durations (the recommendation's)
	state   driftState
	// ref are the runs judged normal (the reference, see step); from is
	// where the current block (screening), the confirmation or the release
	// window starts.
	ref  []int
	from int
	// While confirming or held: the half of the reference held for the
	// confirmation, the whole reference held for the release, the suspect
	// run, the confirming run, and the confirmation's looks made so far.
	confirmBase []int
	releaseBase []int
	suspect     int
	confirmed   int
	spent       int
}

func (r *replay) count(i int) int { return r.samples[i].n() }

// trials counts the window trials of runs idx.
func (r *replay) trials(idx []int) int {
	n := 0
	for _, i := range idx {
		n += r.count(i)
	}
	return n
}

// span is runs a through b.
func span(a, b int) []int {
	var idx []int
	for i := a; i <= b; i++ {
		idx = append(idx, i)
	}
	return idx
}

// newest is run j and the runs before it, down to run lo, while they fit
// in WindowTrials (run j at least).
func (r *replay) newest(j, lo int) []int {
	w0, n := j, r.count(j)
	for w0-1 >= lo && n+r.count(w0-1) <= r.o.WindowTrials {
		w0--
		n += r.count(w0)
	}
	return span(w0, j)
}

// pool is the window values of runs idx as one sample.
func (r *replay) pool(idx []int) *sample { return poolOf(r.samples, idx) }

// poolOf is the samples per[i] of runs idx as one sample, trials
// renumbered.
func poolOf(per []*sample, idx []int) *sample {
	s := &sample{}
	for _, i := range idx {
		src := per[i]
		for k, v := range src.values {
			s.add(len(s.values)+1, v, src.censored[k])
		}
	}
	return s
}

// test judges the runs win against the runs base at level alpha.
func (r *replay) test(base, win []int, alpha float64) Verdict {
	return windowTest(r.pool(base), r.pool(win), alpha, r.o.Compare)
}

// halves splits the reference's runs alternately: the screen's half and
// the confirmation's. Both span the reference's whole period, and they
// share no trial.
func (r *replay) halves() (screen, confirm []int) {
	for k, i := range r.ref {
		if k%2 == 0 {
			screen = append(screen, i)
		} else {
			confirm = append(confirm, i)
		}
	}
	return screen, confirm
}

// grow adds runs to the reference and drops its oldest runs while it
// holds more than DriftReferenceBaselines baselines without them.
func (r *replay) grow(runs []int) {
	r.ref = append(slices.Clone(r.ref), runs...)
	for len(r.ref) > 1 && r.trials(r.ref[1:]) >= DriftReferenceBaselines*r.o.BaselineTrials {
		r.ref = r.ref[1:]
	}
}

// step judges run j and moves the state on.
//
// The reference is the runs judged normal: the segment's first runs up to
// BaselineTrials, then every block judged like it, up to
// DriftReferenceBaselines baselines (the oldest leave first, so it follows
// slow benign change). Screening works in blocks: the runs since the
// reference, pooled as they come (a change shows after a few runs, not
// diluted in a window of old ones), tested at each run against the
// screen's half of the reference. A block that reaches WindowTrials
// without a screen firing is checked against the whole reference at the
// lenient DriftReleaseAlpha: like it, it joins the reference; not like it,
// a new block starts against the same reference, so a change too small
// for the screen is never taken in as the new normal.
func (r *replay) step(j int) RunVerdict {
	v := RunVerdict{Run: j, Verdict: NotJudged}
	switch r.state {
	case driftConfirming:
		v.Window, v.Baseline = span(r.from, j), r.confirmBase
		r.fill(&v)
		// The looks this run reaches (a run may pass more than one
		// quarter), and the share of the confirmation's level they spend.
		looks := min(DriftConfirmLooks, v.WindowN*DriftConfirmLooks/r.o.WindowTrials)
		v.Verdict = Suspect
		if looks > r.spent {
			alpha := r.o.ConfirmAlpha * float64(looks-r.spent) / DriftConfirmLooks
			r.spent = looks
			switch {
			case r.test(v.Baseline, v.Window, alpha) == Worse:
				v.Verdict = Worse
				r.state, r.confirmed, r.from = driftHeld, j, j+1
			case looks == DriftConfirmLooks:
				// Cleared; the reference stays as it was: nothing since
				// has been shown to be like it.
				v.Verdict, v.Cleared = Same, true
				r.state, r.from = driftScreening, j+1
			}
		}
		v.Frozen, v.ChangeRun = r.state != driftScreening, r.suspect
		if r.state == driftHeld {
			v.Confirmed = r.confirmed
		}
		return v
	case driftHeld:
		v.Baseline, v.Frozen, v.ChangeRun, v.Confirmed = r.releaseBase, true, r.suspect, r.confirmed
		v.Window = span(r.from, j)
		v.Verdict = Worse
		r.fill(&v)
		if v.WindowN < r.o.WindowTrials {
			v.ReleaseNeed = r.o.WindowTrials - v.WindowN
			return v
		}
		if r.test(v.Baseline, v.Window, r.o.ReleaseAlpha) == Worse {
			r.from = j + 1 // still worse: a fresh release window
			return v
		}
		v.Verdict, v.Released, v.Frozen = Same, true, false
		r.state, r.ref, r.from = driftScreening, r.releaseBase, j+1
		r.grow(v.Window)
		return v
	}
	if r.ref == nil {
		// The segment's first runs, this one included, fill the first
		// reference: nothing is judged before it holds BaselineTrials.
		v.Baseline = span(r.first, j)
		r.fill(&v)
		if v.BaselineN >= r.o.BaselineTrials {
			r.ref, r.from = v.Baseline, j+1
		} else {
			v.Need = r.o.BaselineTrials - v.BaselineN
		}
		return v
	}
	screen, confirm := r.halves()
	v.Window, v.Baseline = span(r.from, j), screen
	r.fill(&v)
	v.Verdict = r.test(v.Baseline, v.Window, r.o.ScreenAlpha)
	switch {
	case v.Verdict == Worse:
		v.Verdict, v.Frozen, v.ChangeRun = Suspect, true, j
		r.state, r.suspect, r.from, r.spent = driftConfirming, j, j+1, 0
		r.confirmBase, r.releaseBase = confirm, r.ref
	case v.WindowN >= r.o.WindowTrials:
		if r.test(r.ref, v.Window, r.o.ReleaseAlpha) != Worse {
			r.grow(v.Window)
		}
		r.from = j + 1
	}
	return v
}

// fill counts the trials of v's two sides.
func (r *replay) fill(v *RunVerdict) {
	v.WindowN, v.BaselineN = r.trials(v.Window), r.trials(v.Baseline)
}

// Needs are the runs the newest judgement rests on beyond the newest
// ones: the reference the screen tests against and, while a change is
// confirming or held, the baseline held for it. Retention must keep them:
// without them a replay would take what came after (a regression among
// it) for the reference.
func (d *Drift) Needs() []string {
	if len(d.Tests) == 0 {
		return nil
	}
	var names []string
	for _, i := range d.needs {
		names = append(names, d.Runs[i].Name)
	}
	return names
}

// windowSample is the window values of a run's trials, as a Summary takes
// them (a trial cut at the hold is censored there), and the durations the
// recommendation covers (traffic end − prestop_called, or − sigterm).
func windowSample(f *File) (window, cover *sample) {
	window, cover = &sample{}, &sample{}
	for i := range f.Trials {
		t := &f.Trials[i]
		if !t.PointValid(PointWindow) {
			continue
		}
		if v, ok := t.Offset(PointWindow); ok {
			window.add(t.Trial, float64(v), t.Censored() && censorable(PointWindow))
		}
		if v, from, ok := t.AfterTermination(); ok && t.PointValid(from) {
			cover.add(t.Trial, float64(v), t.Censored())
		}
	}
	return window, cover
}

// figures sets v's own numbers from its Recent runs: the upper bound of
// the covered duration at the runs' quantile and confidence (the
// recommendation's CoverNS, as a Summary of those runs computes it) and
// the window's median, from the samples alone: a whole Summary a run,
// every metric and interval, was a third of a history's judgement.
func (r *replay) figures(v *RunVerdict) {
	var h *Header
	if len(v.Recent) > 0 {
		h = r.runs[v.Recent[len(v.Recent)-1]].File.Header
	}
	o := NewSummary(h, Options{}).options()
	w, c := poolOf(r.samples, v.Recent), poolOf(r.covers, v.Recent)
	if c.n() > 0 {
		if b, ok := newBound(c, o.Quantile, o.Confidence); ok {
			v.BoundNS, v.BoundCovers, v.BoundFloor = b.NS, b.Covers, b.LowerBound
		}
	}
	if n := w.n(); n > 0 {
		p50, _ := w.rank(quantileRank(0.5, n))
		v.WindowP50NS = int64(p50)
	}
}
