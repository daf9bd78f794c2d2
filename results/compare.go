package results

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Verdict is a metric's change between a baseline and a new run.
type Verdict string

// Verdicts.
const (
	Better Verdict = "better"
	Same   Verdict = "same"
	Worse  Verdict = "worse"
	// NotJudged is given to cross-check stages (1 s resolution) and to
	// metrics missing from either run.
	NotJudged Verdict = "n/a"
)

// CompareOptions set what counts as a relevant change.
type CompareOptions struct {
	// MinChange is the least absolute change of a quantile that counts
	// (default DefaultMinChange).
	MinChange time.Duration
	// MinChangeRel is the least change relative to the baseline quantile
	// that counts (default DefaultMinChangeRel).
	MinChangeRel float64
}

// Defaults of CompareOptions: changes under 50 ms or 10% are not worth an
// alarm for a setting configured in whole seconds.
const (
	DefaultMinChange    = 50 * time.Millisecond
	DefaultMinChangeRel = 0.10
)

// FamilyError is the chance that a comparison of two runs of one and the
// same setup calls anything worse or better. A comparison makes, per
// metric, one test per judged quantile and one tail test — fifty or more —
// and splits FamilyError among them (weighted Bonferroni, see allot):
// valid whatever the dependence between stages, which move together along
// the paths they share.
const FamilyError = 0.05

// CompareQuantiles are the quantiles compared by bootstrap.
var CompareQuantiles = []float64{0.50, 0.95, 0.99}

// MinTailTrials is how many trials of each run must lie above a quantile
// for a bootstrap verdict to rest on it: n·(1−q) ≥ 5, so p50 is judged from
// 10 trials, p95 from 100, p99 from 500. Below that a quantile is one of
// the few largest values, its bootstrap interval is unreliable (the
// resamples cannot reach beyond the sample's maximum), and a single slow
// trial would read as a regression. The tail test (see tailTest) judges the
// upper tail at every size instead.
const MinTailTrials = 5

// Judged reports whether a bootstrap verdict may rest on quantile q of runs
// of n0 and n1 trials.
func Judged(q float64, n0, n1 int) bool {
	return float64(min(n0, n1))*(1-q) >= MinTailTrials-1e-9
}

// NeedTrials is the least run size at which quantile q is judged.
func NeedTrials(q float64) int { return int(math.Ceil(MinTailTrials/(1-q) - 1e-9)) }

// Why a quantile, a tail test or a whole metric is not judged
// (QuantileChange.NotJudged, TailChange.NotJudged, MetricChange.NotJudged).
// NotJudgedNoBase and NotJudgedNoNew: one of the runs has no valid trial
// of the metric.
const (
	NotJudgedCensored   = "censored"
	NotJudgedFewTrials  = "few-trials"
	NotJudgedCrossCheck = "cross-check"
	NotJudgedNoBase     = "no-baseline-trial"
	NotJudgedNoNew      = "no-new-trial"
)

// QuantileChange is the change of one quantile of one metric.
type QuantileChange struct {
	Quantile float64 `json:"quantile"`
	BaseNS   int64   `json:"base_ns"`
	NewNS    int64   `json:"new_ns"`
	DiffNS   int64   `json:"diff_ns"`
	// BaseLower, NewLower: the quantile falls on a trial cut at the hold,
	// its value is a floor.
	BaseLower bool `json:"base_lower,omitempty"`
	NewLower  bool `json:"new_lower,omitempty"`
	// Rel is DiffNS / |BaseNS| (0 when BaseNS is 0).
	Rel float64 `json:"rel"`
	// CILoNS, CIHiNS bound the difference (percentile bootstrap of both
	// runs, exact: ExactBootstrapQuantileDiffs, at Level = 1 − the test's
	// share of the family error).
	CILoNS int64   `json:"ci_lo_ns"`
	CIHiNS int64   `json:"ci_hi_ns"`
	Level  float64 `json:"level,omitempty"`
	// Significant: the interval excludes 0. Relevant: |DiffNS| reaches
	// max(MinChange, MinChangeRel·|BaseNS|). Judged: both runs have enough
	// trials above the quantile (see Judged) and neither falls on a trial
	// cut at the hold; NotJudged says why not (NotJudgedCensored,
	// NotJudgedFewTrials with Need the least run size that is judged, or
	// NotJudgedCrossCheck).
	Significant bool   `json:"significant"`
	Relevant    bool   `json:"relevant"`
	Judged      bool   `json:"judged"`
	NotJudged   string `json:"not_judged,omitempty"`
	Need        int    `json:"need,omitempty"`
}

// MetricChange is the comparison of one metric.
type MetricChange struct {
	Metric  string           `json:"metric"`
	NBase   int              `json:"n_base"`
	NNew    int              `json:"n_new"`
	Changes []QuantileChange `json:"changes,omitempty"`
	// Tail is the tail test (nil when not made: the cross-check stage, or
	// a run without the metric).
	Tail    *TailChange `json:"tail,omitempty"`
	Verdict Verdict     `json:"verdict"`
	// NotJudged says why the verdict is NotJudged when no test of the
	// metric could be made: NotJudgedCrossCheck, NotJudgedNoBase or
	// NotJudgedNoNew, or NotJudgedFewTrials — no quantile has enough
	// trials and no outcome of the tail test could reach its share — with
	// Need the least run size, both runs alike, at which one is judged.
	NotJudged string `json:"not_judged,omitempty"`
	Need      int    `json:"need,omitempty"`
}

// Comparison is a baseline run against a new one.
type Comparison struct {
	Options CompareOptions `json:"-"`
	// Tests is the number of tests made (judged quantiles and tail tests);
	// WindowAlpha is the share of FamilyError the window's tests run at
	// together, OtherAlpha the share every other test runs at, each.
	Tests       int            `json:"tests"`
	WindowAlpha float64        `json:"window_alpha,omitempty"`
	OtherAlpha  float64        `json:"other_alpha,omitempty"`
	Metrics     []MetricChange `json:"metrics"`
}

// allot splits FamilyError among the tests made (weighted Bonferroni:
// the shares add up to at most FamilyError, so the chance that any test of
// two like runs fires is at most that, whatever their dependence). The
// window — what the recommendation rests on, and what a rerun after an
// upgrade is about — gets half, split evenly between its tail test and its
// judged quantiles; every other test shares the other half. A half with no
// test goes to the other one.
func allot(windowCentral, windowTail, others int) (tail, central, other float64) {
	wTests := windowCentral + windowTail
	wShare, oShare := FamilyError/2, FamilyError/2
	switch {
	case wTests == 0:
		wShare, oShare = 0, FamilyError
	case others == 0:
		wShare, oShare = FamilyError, 0
	}
	if others > 0 {
		other = oShare / float64(others)
	}
	switch {
	case windowTail > 0 && windowCentral > 0:
		tail, central = wShare/2, wShare/2/float64(windowCentral)
	case windowTail > 0:
		tail = wShare
	case windowCentral > 0:
		central = wShare / float64(windowCentral)
	}
	return tail, central, other
}

// split is how FamilyError is shared among a comparison's tests (see
// allot): the window's tail test, each of its judged quantiles, and every
// other test. Tests counts them all; wCentral the window's quantiles.
type split struct {
	tail, central, other float64
	tests, wCentral      int
}

// shares splits FamilyError among the tests of metrics names whose runs
// have the sizes given. It reads the run sizes only — never the values,
// nor which quantiles fall on trials cut at the hold — so the share of
// each test is fixed before the data are read (a share that grew when
// another test could not be made would be chosen by the data). Per
// metric measured in both runs: one test per quantile Judged at those
// sizes and one tail test; the cross-check stage makes none.
func shares(names []string, sizes func(name string) (n0, n1 int)) split {
	var sp split
	wTail, others := 0, 0
	for _, name := range names {
		n0, n1 := sizes(name)
		if name == StageServerDeleteTime || n0 == 0 || n1 == 0 {
			continue
		}
		central := 0
		for _, q := range CompareQuantiles {
			if Judged(q, n0, n1) {
				central++
			}
		}
		if name == PointWindow {
			sp.wCentral, wTail = central, 1
		} else {
			others += central + 1
		}
	}
	sp.tests = sp.wCentral + wTail + others
	sp.tail, sp.central, sp.other = allot(sp.wCentral, wTail, others)
	return sp
}

// alphas are the shares metric name's quantile tests and tail test run at.
func (sp split) alphas(name string) (quantile, tail float64) {
	if name == PointWindow {
		return sp.central, sp.tail
	}
	return sp.other, sp.other
}

// Compare compares every metric of two closed summaries. The verdict rule:
// a metric is worse when, for a judged quantile (see Judged: p50 from 10
// trials, p95 from 100), the confidence interval of the difference lies
// entirely above 0 AND the difference is relevant (see CompareOptions), or
// when the tail test (see tailTest) finds the new run's upper tail heavier
// and its quantile there grew by a relevant amount; better when a judged
// quantile is significantly and relevantly lower; worse wins over better
// (a fatter tail with a faster median is still a regression); otherwise
// same. Noise — a shift the tests cannot tell from 0, or a significant but
// tiny one — is never called a regression. A metric none of whose tests
// can be made is not judged (NotJudged, with why and what run size would
// judge it): "same" is said only where a test was made.
func Compare(base, next *Summary, o CompareOptions) *Comparison {
	if o.MinChange <= 0 {
		o.MinChange = DefaultMinChange
	}
	if o.MinChangeRel <= 0 {
		o.MinChangeRel = DefaultMinChangeRel
	}
	c := &Comparison{Options: o}
	seen := map[string]bool{}
	var names []string
	for _, m := range append(base.Metrics(), next.Metrics()...) {
		if !seen[m] {
			seen[m] = true
			names = append(names, m)
		}
	}
	names = orderMetrics(names)
	sp := shares(names, func(name string) (int, int) { return base.samples[name].n(), next.samples[name].n() })
	c.Tests = sp.tests
	c.WindowAlpha, c.OtherAlpha = sp.tail+sp.central*float64(sp.wCentral), sp.other
	for _, name := range names {
		x, y := base.samples[name], next.samples[name]
		mc := MetricChange{Metric: name, NBase: x.n(), NNew: y.n(), Verdict: NotJudged}
		switch {
		case x.n() == 0:
			mc.NotJudged = NotJudgedNoBase
		case y.n() == 0:
			mc.NotJudged = NotJudgedNoNew
		default:
			compareMetric(&mc, base, next, x, y, sp, o)
			smaller := min(x.n(), y.n())
			if t := mc.Tail; t != nil && t.NotJudged != "" {
				t.Need = needTrials(names, name, smaller, true)
			}
			if mc.NotJudged == NotJudgedFewTrials {
				mc.Need = needTrials(names, name, smaller, mc.Changes[0].NotJudged == NotJudgedCensored)
			}
		}
		c.Metrics = append(c.Metrics, mc)
	}
	return c
}

// compareMetric makes the tests of one metric measured in both runs and
// sets its changes and verdict.
func compareMetric(mc *MetricChange, base, next *Summary, x, y *sample, sp split, o CompareOptions) {
	name := mc.Metric
	qAlpha, tAlpha := sp.alphas(name)
	if qAlpha <= 0 {
		// No quantile of this metric is judged: its intervals are
		// not shown, any level does.
		qAlpha = FamilyError
	}
	level := 1 - qAlpha
	cis, _ := ExactBootstrapQuantileDiffs(x.values, y.values, CompareQuantiles, level)
	worse, better, made := false, false, false
	for i, q := range CompareQuantiles {
		qc := compareQuantile(q, x, y, cis[i], o)
		qc.Level = level
		qc.NotJudged, qc.Need = notJudged(base, next, name, q)
		qc.Judged = qc.NotJudged == ""
		mc.Changes = append(mc.Changes, qc)
		made = made || qc.Judged
		if !qc.counts() {
			continue
		}
		if qc.DiffNS > 0 {
			worse = true
		} else {
			better = true
		}
	}
	if name == StageServerDeleteTime {
		// 1 s cross-check: its quantisation is not a change.
		mc.NotJudged = NotJudgedCrossCheck
		return
	}
	if t, ok := tailTest(x, y, tAlpha, o); ok {
		mc.Tail = &t
		worse = worse || t.counts()
		made = made || t.judged()
	}
	switch {
	case !made:
		mc.NotJudged = NotJudgedFewTrials
	case worse:
		mc.Verdict = Worse
	case better:
		mc.Verdict = Better
	default:
		mc.Verdict = Same
	}
}

// metricJudgedAt reports whether, with n trials in each run, some test of
// metric name could be made: its median judged by size (Judged; unless
// medianCensored: it falls on trials cut at the hold), or its tail test
// able to reach its share at the split those sizes give.
func metricJudgedAt(names []string, name string, n int, medianCensored bool) bool {
	if !medianCensored && Judged(CompareQuantiles[0], n, n) {
		return true
	}
	sp := shares(names, func(string) (int, int) { return n, n })
	_, tail := sp.alphas(name)
	_, ok := tailScan(2*n, n, tail)
	return ok
}

// maxNeed bounds the search for a run size that judges a metric; past it
// the report says "needs n>maxNeed".
const maxNeed = 500

// needTrials is the least run size, both runs alike and above from, at
// which metric name is judged (metricJudgedAt); maxNeed+1 when none is up
// to maxNeed.
func needTrials(names []string, name string, from int, medianCensored bool) int {
	for n := from + 1; n <= maxNeed; n++ {
		if metricJudgedAt(names, name, n, medianCensored) {
			return n
		}
	}
	return maxNeed + 1
}

// notJudged says why a bootstrap verdict may not rest on quantile q of
// metric ("" when it may): too few trials above it (need is then the least
// run size that is judged), or its rank held by a trial cut at the hold in
// either run (the tail test reads those), or the 1 s cross-check.
func notJudged(base, next *Summary, metric string, q float64) (why string, need int) {
	x, y := base.samples[metric], next.samples[metric]
	switch {
	case metric == StageServerDeleteTime:
		return NotJudgedCrossCheck, 0
	case x.n() == 0 || y.n() == 0:
		return NotJudgedFewTrials, NeedTrials(q)
	}
	for _, s := range []*sample{x, y} {
		if _, lower := s.rank(quantileRank(q, s.n())); lower {
			return NotJudgedCensored, 0
		}
	}
	if !Judged(q, x.n(), y.n()) {
		return NotJudgedFewTrials, NeedTrials(q)
	}
	return "", 0
}

// orderMetrics puts names in report order (KnownMetrics), then the rest
// as given.
func orderMetrics(names []string) []string {
	rank := map[string]int{}
	for i, m := range KnownMetrics() {
		rank[m] = i
	}
	out := slices.Clone(names)
	slices.SortStableFunc(out, func(a, b string) int {
		ra, okA := rank[a]
		rb, okB := rank[b]
		switch {
		case okA && okB:
			return ra - rb
		case okA:
			return -1
		case okB:
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

func compareQuantile(q float64, x, y *sample, ci Interval, o CompareOptions) QuantileChange {
	bq, bl := x.rank(quantileRank(q, x.n()))
	nq, nl := y.rank(quantileRank(q, y.n()))
	qc := QuantileChange{Quantile: q, BaseNS: int64(bq), NewNS: int64(nq), DiffNS: int64(nq - bq), BaseLower: bl, NewLower: nl}
	if bq != 0 {
		qc.Rel = (nq - bq) / math.Abs(bq)
	}
	qc.CILoNS, qc.CIHiNS = int64(ci.Lo), int64(ci.Hi)
	qc.Significant = ci.Lo > 0 || ci.Hi < 0
	qc.Relevant = math.Abs(nq-bq) >= relevantChange(qc.BaseNS, o)
	return qc
}

// relevantChange is the least change of a quantile whose baseline is base
// that counts: max(MinChange, MinChangeRel·|base|).
func relevantChange(base int64, o CompareOptions) float64 {
	return max(float64(o.MinChange), o.MinChangeRel*math.Abs(float64(base)))
}

// counts reports whether this change makes a verdict.
func (qc QuantileChange) counts() bool { return qc.Judged && qc.Significant && qc.Relevant }

// Metric returns the named metric's change.
func (c *Comparison) Metric(name string) (MetricChange, bool) {
	name = NormalizeMetric(name)
	for _, m := range c.Metrics {
		if m.Metric == name {
			return m, true
		}
	}
	return MetricChange{}, false
}

func signedDur(ns int64) string {
	if ns >= 0 {
		return "+" + fmtDur(ns)
	}
	return fmtDur(ns)
}

// NewCompareTextReporter renders a comparison as a table: per metric and
// judged quantile the baseline, the new value, the difference with its
// interval; per metric its tail test; and the metric's verdict. Every line
// fits TextWidth columns.
func NewCompareTextReporter(c *Comparison) Reporter {
	return NewCompareTextReporterWidth(c, TextWidth)
}

// NewCompareTextReporterWidth is NewCompareTextReporter for a terminal
// width columns wide (<= 0: TextWidth): the legend wraps to it; the table's
// rows are at most 96 columns whatever the metric's name (the name goes
// on a line of its own).
func NewCompareTextReporterWidth(c *Comparison, width int) Reporter {
	if width <= 0 {
		width = TextWidth
	}
	return func(w io.Writer) error {
		e := &errWriter{w: w}
		// The metric on a line of its own with its verdict, its rows
		// indented below: names run to 35 runes, and the rows must fit 100
		// columns.
		e.printf("%-6s %3s %3s %9s %9s %9s %6s  %-21s %s\n", "q", "n0", "n1", "baseline", "new", "Δ", "Δ%", "CI of Δ / tail p", "why / above")
		for _, m := range c.Metrics {
			e.printf("%s: %s\n", m.Metric, m.verdictText())
			if len(m.Changes) == 0 {
				e.printf("%-6s %3d %3d\n", "", m.NBase, m.NNew)
				continue
			}
			line := func(q, base, next, diff, rel, mark, ci, why string) {
				l := fmt.Sprintf("  %-4s %3d %3d %9s %9s %9s %6s %s%-21s %s", q, m.NBase, m.NNew, base, next, diff, rel, mark, ci, why)
				e.printf("%s\n", strings.TrimRight(l, " "))
			}
			for _, qc := range m.Changes {
				mark, ci, why := " ", fmt.Sprintf("[%s, %s]", signedDur(qc.CILoNS), signedDur(qc.CIHiNS)), ""
				switch {
				case qc.counts():
					mark = "*"
				case !qc.Judged:
					mark, ci = "~", ""
					switch qc.NotJudged {
					case NotJudgedCensored:
						why = "censored"
					case NotJudgedFewTrials:
						why = needText(qc.Need)
					case NotJudgedCrossCheck:
						why = "1 s stamps"
					}
				}
				line("p"+trimFloat(qc.Quantile*100), floorDur(qc.BaseNS, qc.BaseLower), floorDur(qc.NewNS, qc.NewLower),
					signedDiff(qc.DiffNS, qc.NewLower, qc.BaseLower), relCell(qc.BaseNS, qc.Rel, qc.NewLower, qc.BaseLower), mark, ci, why)
			}
			if t := m.Tail; t != nil && !t.judged() {
				line("tail", "", "", "", "", "~", "", needText(t.Need))
			} else if t != nil {
				mark := "^"
				if t.counts() {
					mark = "*"
				}
				if t.K == 0 {
					line("tail", "", "", "", "", mark, "no threshold", "every trial "+fmtDur(t.TiedNS))
				} else {
					line("p"+trimFloat(math.Floor(t.Quantile*100)), floorDur(t.BaseNS, t.BaseLower), floorDur(t.NewNS, t.NewLower),
						signedDiff(t.NewNS-t.BaseNS, t.NewLower, t.BaseLower), relCell(t.BaseNS, t.Rel, t.NewLower, t.BaseLower), mark,
						fmt.Sprintf("p=%.2g (α %s)", t.P, pctFine(t.Alpha)), fmt.Sprintf("%d→%d above %s", t.BaseAbove, t.NewAbove, fmtDur(t.ThresholdNS)))
				}
			}
		}
		for _, v := range []Verdict{Worse, Better} {
			var names []string
			for _, m := range c.Metrics {
				if m.Verdict == v {
					names = append(names, m.Metric)
				}
			}
			if len(names) == 0 {
				names = []string{"none"}
			}
			for i, l := range wrap(strings.Split(string(v)+": "+strings.Join(names, ", "), " "), " ", width-2) {
				if i == 0 {
					e.printf("\n%s", l)
				} else {
					e.printf("\n  %s", l)
				}
			}
		}
		e.printf("\n")
		legend := []string{
			"n0, n1: trials of the baseline and the new run whose stages for the metric are valid; trials cut at the hold count, as at least what was seen (≥).",
			fmt.Sprintf("%d tests made (judged quantiles and tail tests). Two runs of one setup call anything worse or better with at most %s chance (weighted Bonferroni): the window's tests share %s, every other test runs at %s.",
				c.Tests, pct(FamilyError), pctFine(c.WindowAlpha), pctFine(c.OtherAlpha)),
			fmt.Sprintf("CI of Δ: percentile-bootstrap interval at 1 − the test's share, from the exact bootstrap distribution (no resampling noise). * a change that makes the verdict: its test fires and it reaches max(%s, %s%% of the baseline).",
				c.Options.MinChange, trimFloat(c.Options.MinChangeRel*100)),
			fmt.Sprintf("~ not judged by bootstrap: censored (the quantile falls on a trial cut at the hold), or needs n (fewer than %d trials of a run above it); a tail row \"~ needs n\": no outcome of the tail test could reach its share at these run sizes. \"not judged: n too small\": no test of the metric could be made; it needs that many trials in each run.", MinTailTrials),
			"^ the tail test (the last row of a metric, * when it fires): how many trials of each run lie above a threshold of the pooled trials (baseline → new), at the threshold where that split is least likely under \"same\"; p is exact (Fisher, over every labelling of the pool); the row shows both runs at the threshold's quantile. Trials cut at the hold count above it at their seen value.",
			"\"same\" means no test fired: not \"proved equal\". Smaller runs see only larger changes (docs/compare.md: what 20 and 40 trials detect).",
		}
		for _, l := range legend {
			for i, w := range wrap(strings.Fields(l), " ", width-2) {
				if i == 0 {
					e.printf("\n%s", w)
				} else {
					e.printf("\n  %s", w)
				}
			}
		}
		e.printf("\n")
		return e.err
	}
}

// verdictText is the metric's verdict as its block's heading says it: for
// a metric not judged, why.
func (m MetricChange) verdictText() string {
	switch m.NotJudged {
	case NotJudgedFewTrials:
		return "not judged: n too small (" + needText(m.Need) + ")"
	case NotJudgedNoBase:
		return "n/a (no valid trial of it in the baseline)"
	case NotJudgedNoNew:
		return "n/a (no valid trial of it in the new run)"
	}
	return string(m.Verdict)
}

// needText renders a run size that would judge a test: "needs n=12", or
// past the search "needs n>500".
func needText(n int) string {
	if n > maxNeed {
		return fmt.Sprintf("needs n>%d", maxNeed)
	}
	return fmt.Sprintf("needs n=%d", n)
}

// floorDur renders ns, "≥" first when it is a floor.
func floorDur(ns int64, lower bool) string {
	if lower {
		return "≥" + fmtDur(ns)
	}
	return fmtDur(ns)
}

// signedDiff renders a difference; with a floor on one side it is only a
// bound: "≥+…" when the new value is a floor, "≤…" when the baseline's is.
func signedDiff(ns int64, newLower, baseLower bool) string {
	switch {
	case newLower && baseLower:
		return "?"
	case newLower:
		return "≥" + signedDur(ns)
	case baseLower:
		return "≤" + signedDur(ns)
	}
	return signedDur(ns)
}

// relCell renders a relative change, as a bound when a floor is involved.
func relCell(base int64, rel float64, newLower, baseLower bool) string {
	if base == 0 {
		return "-"
	}
	s := fmt.Sprintf("%+.0f%%", rel*100)
	switch {
	case newLower && baseLower:
		return "?"
	case newLower:
		return "≥" + s
	case baseLower:
		return "≤" + s
	}
	return s
}

// pctFine renders a small share: 0.0125 as "1.25%", 0.0004 as "0.04%".
func pctFine(f float64) string {
	switch {
	case f >= 0.01:
		return trimFloat(f*100) + "%"
	case f <= 0:
		return "0%"
	}
	return fmt.Sprintf("%.2g%%", f*100)
}

// NewCompareJSONReporter renders a comparison as indented JSON.
func NewCompareJSONReporter(c *Comparison) Reporter {
	return func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
}

// Thresholds gate a run, k6-style: any breach makes the command exit
// non-zero.
type Thresholds struct {
	// MaxP99 caps the p99 of a metric in the new run (--max-p99 window=3s).
	MaxP99 map[string]time.Duration
	// MaxRegression caps the relative increase of a quantile that the
	// comparison judged worse (--max-regression 20% → 0.2); 0 disables it.
	MaxRegression float64
}

// Empty reports whether no threshold is set.
func (t Thresholds) Empty() bool { return len(t.MaxP99) == 0 && t.MaxRegression == 0 }

// Breach is one threshold a run broke. CannotTell is set when the run
// cannot show the threshold was met: the value is only a floor (trials cut
// at the hold) and the floor is within the limit — the true value may be
// above it; a longer hold tells.
type Breach struct {
	Metric     string `json:"metric"`
	Rule       string `json:"rule"`
	Detail     string `json:"detail"`
	CannotTell bool   `json:"cannot_tell,omitempty"`
}

// String renders a breach as "rule: metric: detail".
func (b Breach) String() string { return fmt.Sprintf("%s: %s: %s", b.Rule, b.Metric, b.Detail) }

// OnlyCannotTell reports whether every breach is a floor that could not be
// judged (none is a certain breach): the run needs a longer hold, not a fix.
func OnlyCannotTell(bs []Breach) bool {
	for _, b := range bs {
		if !b.CannotTell {
			return false
		}
	}
	return len(bs) > 0
}

// cannotTell is the detail's tail for a floor within a limit.
const cannotTell = "cannot tell: rerun with a longer --hold"

// KnownMetrics are the names a threshold may name: every point and delta.
func KnownMetrics() []string {
	out := append([]string(nil), Points...)
	for _, d := range Deltas {
		out = append(out, d.Name())
	}
	out = append(out, StartupPoints...)
	for _, d := range StartupDeltas {
		out = append(out, d.Name())
	}
	return out
}

// ParseMaxP99 parses repeated --max-p99 values "metric=duration".
func ParseMaxP99(specs []string) (map[string]time.Duration, error) {
	known := map[string]bool{}
	for _, m := range KnownMetrics() {
		known[m] = true
	}
	out := map[string]time.Duration{}
	for _, spec := range specs {
		name, val, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("--max-p99 %q: want metric=duration, e.g. window=3s", spec)
		}
		name = NormalizeMetric(name)
		if !known[name] {
			return nil, fmt.Errorf("--max-p99 %q: unknown metric %q (one of %s; a delta as from->to)", spec, name, strings.Join(KnownMetrics(), ", "))
		}
		d, err := time.ParseDuration(strings.TrimSpace(val))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--max-p99 %q: want a positive duration like 3s or 2500ms", spec)
		}
		out[name] = d
	}
	return out, nil
}

// ParseRegression parses --max-regression: "20%" or "0.2" (a fraction).
func ParseRegression(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	pct := strings.HasSuffix(s, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("--max-regression %q: want a positive percentage like 20%%", s)
	}
	if pct {
		f /= 100
	}
	return f, nil
}

// Check returns every breach of t by the new run next and, when not nil,
// its comparison with a baseline. A --max-p99 metric without samples is a
// breach: a gate must not pass for want of evidence. A floor (the value
// falls on a trial cut at the hold) above the limit is a breach; a floor
// within it is one that cannot be told (CannotTell): the limit was not
// shown to be met.
func (t Thresholds) Check(next *Summary, c *Comparison) []Breach {
	var out []Breach
	for _, name := range orderMetrics(keys(t.MaxP99)) {
		limit := t.MaxP99[name]
		d, ok := next.Dist(name)
		label := "p99"
		if d.N > 0 && d.N < MaxIsQuantile(0.99) {
			label = fmt.Sprintf("p99 (the largest of %d trials)", d.N)
		}
		switch {
		case !ok:
			out = append(out, Breach{Metric: name, Rule: "max-p99", Detail: fmt.Sprintf("no valid trial measured it (limit %s)", limit)})
		case d.Lower(0.99) && time.Duration(d.P99NS) > limit:
			out = append(out, Breach{Metric: name, Rule: "max-p99", Detail: fmt.Sprintf("%s ≥ %s > %s (n=%d, %d cut at the hold)", label, fmtDur(d.P99NS), limit, d.N, d.Censored)})
		case d.Lower(0.99):
			out = append(out, Breach{Metric: name, Rule: "max-p99", CannotTell: true,
				Detail: fmt.Sprintf("%s ≥ %s, only a floor (n=%d, %d cut at the hold), limit %s: %s", label, fmtDur(d.P99NS), d.N, d.Censored, limit, cannotTell)})
		case time.Duration(d.P99NS) > limit:
			out = append(out, Breach{Metric: name, Rule: "max-p99", Detail: fmt.Sprintf("%s %s > %s (n=%d)", label, fmtDur(d.P99NS), limit, d.N)})
		}
	}
	if t.MaxRegression > 0 && c != nil {
		for _, m := range c.Metrics {
			if b, ok := t.regression(m); ok {
				out = append(out, b)
			}
		}
	}
	return out
}

// unjudged is the --max-regression breach of a metric no test could judge:
// the gate cannot tell whether it regressed (a gate must not pass for want
// of evidence). A metric the baseline lacks has nothing to regress from.
func unjudged(m MetricChange) (Breach, bool) {
	b := Breach{Metric: m.Metric, Rule: "max-regression", CannotTell: true}
	switch m.NotJudged {
	case NotJudgedFewTrials:
		b.Detail = fmt.Sprintf("not judged: n too small (%d and %d trials; %s a run): cannot tell whether it regressed, rerun with more --trials",
			m.NBase, m.NNew, strings.TrimPrefix(needText(m.Need), "needs "))
	case NotJudgedNoNew:
		b.Detail = fmt.Sprintf("the new run has no valid trial of it (the baseline has %d): cannot tell whether it regressed", m.NBase)
	default:
		return Breach{}, false
	}
	return b, true
}

// regression is the --max-regression breach of a metric judged worse: the
// first judged quantile, or else the tail test, whose growth exceeds the
// limit; a growth within the limit measured against a floor cannot be told;
// and of a metric not judged at all, see unjudged.
func (t Thresholds) regression(m MetricChange) (Breach, bool) {
	if m.Verdict == NotJudged {
		return unjudged(m)
	}
	if m.Verdict != Worse {
		return Breach{}, false
	}
	limit := trimFloat(t.MaxRegression*100) + "%"
	for _, qc := range m.Changes {
		if qc.counts() && qc.DiffNS > 0 && (qc.BaseNS <= 0 || qc.Rel > t.MaxRegression) {
			return Breach{Metric: m.Metric, Rule: "max-regression", Detail: fmt.Sprintf("p%s %s → %s (%+.0f%% > %s, %s CI of Δ %s … %s)",
				trimFloat(qc.Quantile*100), fmtDur(qc.BaseNS), fmtDur(qc.NewNS), qc.Rel*100, limit,
				trimFloat(qc.Level*100)+"%", signedDur(qc.CILoNS), signedDur(qc.CIHiNS))}, true
		}
	}
	tl := m.Tail
	if !tl.counts() {
		return Breach{}, false
	}
	q := "p" + trimFloat(math.Floor(tl.Quantile*100))
	tail := fmt.Sprintf("tail: %d of %d new trials above %s against %d of %d, p=%.2g", tl.NewAbove, m.NNew, fmtDur(tl.ThresholdNS), tl.BaseAbove, m.NBase, tl.P)
	switch {
	case tl.BaseNS <= 0 || tl.Rel > t.MaxRegression:
		return Breach{Metric: m.Metric, Rule: "max-regression", Detail: fmt.Sprintf("%s %s → %s (%s%+.0f%% > %s; %s)",
			q, fmtDur(tl.BaseNS), floorDur(tl.NewNS, tl.NewLower), map[bool]string{true: "≥", false: ""}[tl.NewLower], tl.Rel*100, limit, tail)}, true
	case tl.NewLower:
		return Breach{Metric: m.Metric, Rule: "max-regression", CannotTell: true, Detail: fmt.Sprintf("%s %s → %s (≥%+.0f%%, only a floor, limit %s; %s): %s",
			q, fmtDur(tl.BaseNS), floorDur(tl.NewNS, true), tl.Rel*100, limit, tail, cannotTell)}, true
	}
	return Breach{}, false
}

// MaxIsQuantile is the least n at which the empirical q-quantile is not the
// largest trial: n ≥ 1/(1−q) (100 for p99, 20 for p95). Below it a column
// labelled p99 would be the maximum.
func MaxIsQuantile(q float64) int { return int(math.Ceil(1/(1-q) - 1e-9)) }

func keys(m map[string]time.Duration) []string { return slices.Collect(maps.Keys(m)) }
