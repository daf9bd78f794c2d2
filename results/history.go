package results

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// A history is the runs of one cluster in the order they ran (a scheduled
// measure appends one every few hours). Drift compares the newest run, and
// the runs just before it, with a pooled baseline of older trials: a slow
// mode in 10% of deletions needs about 120 trials a side to be seen
// (docs/compare.md), far more than one scheduled run holds, so both sides
// pool runs.
//
// The history splits into segments wherever the settings that shape the
// window change (Settings: the Kubernetes version, the controller and its
// version and settings, the route, the observers, the hold): trials of
// different settings are never pooled, and a change of settings is
// reported as the segment boundary, not judged as drift. Within the newest
// segment each run in turn is tested (replayed from the stored runs, so no
// state is kept beside them): the window side is the newest runs up to
// WindowTrials, the baseline the BaselineTrials before them. Once a run is
// judged worse, the baseline stays where it was before that run's window
// (the detected change), so a regression that persists keeps being
// reported instead of becoming the new normal; a change of settings
// starts afresh.

// Settings are the settings of a run that shape its window, as "name=value"
// in a fixed order.
type Settings []string

// SettingsOf reads the settings of a run from its header.
func SettingsOf(h *Header) Settings {
	if h == nil {
		return nil
	}
	var s Settings
	add := func(name, v string) {
		if v != "" {
			s = append(s, name+"="+v)
		}
	}
	add("kubernetes", h.ServerVersion)
	add("ingress.class", h.Ingress.Class)
	add("ingress.controller", h.Ingress.Controller)
	add("ingress.version", h.Ingress.Version)
	for _, k := range slices.Sorted(maps.Keys(h.Ingress.Settings)) {
		add("ingress."+k, h.Ingress.Settings[k])
	}
	add("route.kind", h.Route.Kind)
	add("route.controller", h.Route.Controller)
	add("route.gateway_class", h.Route.GatewayClass)
	for _, o := range h.Observers {
		add("observer."+o.Name+".interval", fmtDurIf(o.IntervalNS))
		for _, k := range slices.Sorted(maps.Keys(o.Settings)) {
			add("observer."+o.Name+"."+k, o.Settings[k])
		}
	}
	add("mode", h.Mode)
	add("hold", fmtDurIf(h.HoldNS))
	if h.InClusterLoad > 0 {
		add("in_cluster_load", strconv.Itoa(h.InClusterLoad))
	}
	return s
}

func fmtDurIf(ns int64) string {
	if ns == 0 {
		return ""
	}
	return fmtDur(ns)
}

// Changes lists what differs from before to s: "name: old → new", with
// "(none)" for a setting one side lacks.
func (s Settings) Changes(before Settings) []string {
	split := func(ss Settings) map[string]string {
		m := map[string]string{}
		for _, kv := range ss {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	a, b := split(before), split(s)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(mergeKeys(a, b))) {
		if a[k] != b[k] {
			out = append(out, fmt.Sprintf("%s: %s → %s", k, orNone(a[k]), orNone(b[k])))
		}
	}
	return out
}

func mergeKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// HistoryRun is one run of a history: its name (the file's) and content.
type HistoryRun struct {
	Name string
	File *File
}

// DriftOptions size the two sides of a drift comparison.
type DriftOptions struct {
	// BaselineTrials is how many trials the baseline pools (default
	// DefaultBaselineTrials); a run with fewer before it is not judged.
	BaselineTrials int
	// WindowTrials is the most trials the window side pools, newest runs
	// first (default DefaultWindowTrials).
	WindowTrials int
	Compare      CompareOptions
}

// Defaults of DriftOptions: 120 trials a side catch a +30 s slow mode in
// 10% of deletions 9 times in 10 (docs/compare.md's power table).
const (
	DefaultBaselineTrials = 120
	DefaultWindowTrials   = 120
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
	// Window and Baseline index the runs each side pooled, oldest first;
	// WindowN and BaselineN count their trials that measured the window.
	Window    []int `json:"window_runs"`
	Baseline  []int `json:"baseline_runs"`
	WindowN   int   `json:"window_n"`
	BaselineN int   `json:"baseline_n"`
	// Verdict is the window metric's (NotJudged while the segment has
	// fewer than BaselineTrials trials before the window: Need says how
	// many more).
	Verdict Verdict `json:"verdict"`
	Need    int     `json:"need,omitempty"`
	// Frozen is set when the baseline was held before an earlier run
	// judged worse (ChangeRun).
	Frozen    bool `json:"frozen,omitempty"`
	ChangeRun int  `json:"change_run,omitempty"`
	// The window side's own numbers: the upper bound of the window the
	// preStop covers (the recommendation's, at the run's quantile and
	// confidence; 0 without one), the share of deletions it covers, set
	// BoundFloor when it is only a floor; and the window's median.
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
	// Comparison is the newest run's window side against its baseline
	// (nil when not judged).
	Comparison *Comparison
}

// DriftOf segments runs (oldest first) and replays the newest segment's
// tests up to its newest run.
func DriftOf(runs []HistoryRun, o DriftOptions) *Drift {
	if o.BaselineTrials <= 0 {
		o.BaselineTrials = DefaultBaselineTrials
	}
	if o.WindowTrials <= 0 {
		o.WindowTrials = DefaultWindowTrials
	}
	d := &Drift{Runs: runs}
	for i, r := range runs {
		s := SettingsOf(r.File.Header)
		if n := len(d.Segments); n > 0 && slices.Equal(d.Segments[n-1].Settings, s) {
			d.Segments[n-1].Last = i
			continue
		}
		seg := Segment{First: i, Last: i, Settings: s}
		if n := len(d.Segments); n > 0 {
			seg.Changes = s.Changes(d.Segments[n-1].Settings)
		}
		d.Segments = append(d.Segments, seg)
	}
	if len(d.Segments) == 0 {
		return d
	}
	seg := d.Segments[len(d.Segments)-1]
	// counts[i]: run i's trials that measured the window.
	counts := make([]int, len(runs))
	for i := seg.First; i <= seg.Last; i++ {
		counts[i] = windowTrials(runs[i].File)
	}
	// before(i): the trials of the segment's runs before run i.
	before := func(i int) int {
		n := 0
		for k := seg.First; k < i; k++ {
			n += counts[k]
		}
		return n
	}
	frozenEnd, changeRun := -1, 0 // once a change is detected: the baseline ends before run frozenEnd
	var last *Comparison
	// The newest run with trials: a run that has timed no deletion yet
	// (a scheduled run just started, or one stopped before its first
	// trial) carries no evidence, and judging it would blank the bound
	// and the verdict until its first trial lands.
	newest := seg.Last
	for newest > seg.First && counts[newest] == 0 {
		newest--
	}
	for j := seg.First; j <= seg.Last; j++ {
		if counts[j] == 0 && j != newest {
			continue
		}
		v := RunVerdict{Run: j, Verdict: NotJudged}
		// The window: run j and the runs before it while they fit in
		// WindowTrials and leave a whole baseline before them (the first
		// judgement comes once the segment holds BaselineTrials and one
		// run more), and never before a detected change.
		w0 := j
		v.WindowN = counts[j]
		for w0-1 >= max(seg.First, frozenEnd) && v.WindowN+counts[w0-1] <= o.WindowTrials &&
			(frozenEnd >= 0 || before(w0-1) >= o.BaselineTrials) {
			w0--
			v.WindowN += counts[w0]
		}
		for i := w0; i <= j; i++ {
			v.Window = append(v.Window, i)
		}
		// The baseline: the runs before the window, or before the
		// detected change, newest first, until it holds BaselineTrials.
		b1 := w0 - 1
		if frozenEnd >= 0 {
			b1 = frozenEnd - 1
			v.Frozen, v.ChangeRun = true, changeRun
		}
		b0 := b1 + 1
		for b0 > seg.First && v.BaselineN < o.BaselineTrials {
			b0--
			v.BaselineN += counts[b0]
		}
		for i := b0; i <= b1; i++ {
			v.Baseline = append(v.Baseline, i)
		}
		ws := pooled(runs, v.Window)
		if r := ws.doc.Recommendation; r != nil {
			v.BoundNS, v.BoundCovers, v.BoundFloor = r.CoverNS, r.Bound.Covers, r.LowerBound()
		}
		if w, ok := ws.Dist(PointWindow); ok {
			v.WindowP50NS = w.P50NS
		}
		last = nil
		if v.BaselineN < o.BaselineTrials {
			v.Need = o.BaselineTrials - v.BaselineN
		} else {
			c := Compare(pooled(runs, v.Baseline), ws, o.Compare)
			m, _ := c.Metric(PointWindow)
			v.Verdict, last = m.Verdict, c
			if m.Verdict == Worse && frozenEnd < 0 {
				frozenEnd, changeRun = w0, j
			}
		}
		d.Tests = append(d.Tests, v)
	}
	d.Latest, d.Comparison = d.Tests[len(d.Tests)-1], last
	return d
}

// WindowSummary is the newest run's window side: its runs pooled and
// summarised (nil when the history is empty).
func (d *Drift) WindowSummary() *Summary {
	if len(d.Tests) == 0 {
		return nil
	}
	return pooled(d.Runs, d.Latest.Window)
}

// windowTrials counts the trials of f that measured the window.
func windowTrials(f *File) int {
	n := 0
	for i := range f.Trials {
		if f.Trials[i].MeasuredWindow() {
			n++
		}
	}
	return n
}

// pooled is one closed Summary of the trials of runs idx, renumbered so
// that trial numbers stay distinct.
func pooled(runs []HistoryRun, idx []int) *Summary {
	var h *Header
	if len(idx) > 0 {
		h = runs[idx[len(idx)-1]].File.Header
	}
	s := NewSummary(h, Options{})
	n := 0
	for _, i := range idx {
		for _, r := range runs[i].File.Trials {
			n++
			r.Trial = n
			s.Add(&r)
		}
	}
	s.Close()
	return s
}
