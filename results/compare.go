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
// same setup calls anything worse or better. A comparison makes one test
// per metric and judged quantile — two dozen or more — so each test runs at
// 1 − FamilyError/tests (Bonferroni over the tests actually made, see
// Compare): valid whatever the dependence between stages, which move
// together along the paths they share.
const FamilyError = 0.05

// CompareResamples is the least bootstrap size of a comparison; Compare
// raises it so that each tail of every interval holds at least
// tailResamples resamples at the level the tests are run at.
const (
	CompareResamples = 5000
	tailResamples    = 10
)

// CompareQuantiles are the quantiles compared.
var CompareQuantiles = []float64{0.50, 0.95, 0.99}

// MinTailTrials is how many trials of each run must lie above a quantile
// for a verdict to rest on it: n·(1−q) ≥ 5, so p50 is judged from 10
// trials, p95 from 100, p99 from 500. Below that a quantile is one of the
// few largest values, its bootstrap interval is unreliable (the resamples
// cannot reach beyond the sample's maximum), and a single slow trial —
// the EndpointSlice controller's occasional +1 s retry — would read as a
// regression. Such quantiles are shown, not judged.
const MinTailTrials = 5

// Judged reports whether a verdict may rest on quantile q of runs of n0
// and n1 trials.
func Judged(q float64, n0, n1 int) bool {
	return float64(min(n0, n1))*(1-q) >= MinTailTrials-1e-9
}

// QuantileChange is the change of one quantile of one metric.
type QuantileChange struct {
	Quantile float64 `json:"quantile"`
	BaseNS   int64   `json:"base_ns"`
	NewNS    int64   `json:"new_ns"`
	DiffNS   int64   `json:"diff_ns"`
	// Rel is DiffNS / |BaseNS| (0 when BaseNS is 0).
	Rel float64 `json:"rel"`
	// CILoNS, CIHiNS bound the difference (seeded percentile bootstrap of
	// both runs at the comparison's Level).
	CILoNS int64 `json:"ci_lo_ns"`
	CIHiNS int64 `json:"ci_hi_ns"`
	// DetectableNS is the smallest change of this quantile the run sizes
	// could have called worse or better: the larger of the interval's reach
	// below and above the observed change (a shift by less leaves 0 inside
	// the interval) and the least relevant change. 0 when not judged; Need
	// is then the trials each run needs for the quantile to be judged.
	DetectableNS int64 `json:"detectable_ns,omitempty"`
	Need         int   `json:"need,omitempty"`
	// Significant: the interval excludes 0. Relevant: |DiffNS| reaches
	// max(MinChange, MinChangeRel·|BaseNS|). Judged: both runs have enough
	// trials above the quantile (see Judged).
	Significant bool `json:"significant"`
	Relevant    bool `json:"relevant"`
	Judged      bool `json:"judged"`
}

// MetricChange is the comparison of one metric.
type MetricChange struct {
	Metric  string           `json:"metric"`
	NBase   int              `json:"n_base"`
	NNew    int              `json:"n_new"`
	Changes []QuantileChange `json:"changes,omitempty"`
	Verdict Verdict          `json:"verdict"`
}

// Comparison is a baseline run against a new one.
type Comparison struct {
	Options CompareOptions `json:"-"`
	// Tests is the number of metric × quantile tests made (judged); each
	// ran at Level = 1 − FamilyError/Tests, from Resamples resamples.
	Tests     int            `json:"tests"`
	Level     float64        `json:"level"`
	Resamples int            `json:"resamples"`
	Metrics   []MetricChange `json:"metrics"`
}

// Compare compares every metric of two closed summaries. The verdict rule:
// a metric is worse when, for a judged quantile (see Judged: p50 from 10
// trials, p95 from 100), the confidence interval of the difference lies
// entirely above 0 AND the difference is relevant (see CompareOptions);
// better symmetrically; worse wins over better (a fatter
// tail with a faster median is still a regression); otherwise same. Noise —
// a shift the interval cannot tell from 0, or a significant but tiny one —
// is never called a regression.
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
	// Count the tests first: the level of each depends on how many there
	// are.
	for _, name := range names {
		if name == StageServerDeleteTime {
			continue
		}
		for _, q := range CompareQuantiles {
			if judged(base, next, name, q) {
				c.Tests++
			}
		}
	}
	c.Level = 1 - FamilyError/float64(max(c.Tests, 1))
	c.Resamples = max(CompareResamples, int(math.Ceil(tailResamples*2/(1-c.Level))))
	for _, name := range names {
		x, _ := base.Samples(name)
		y, _ := next.Samples(name)
		mc := MetricChange{Metric: name, NBase: len(x), NNew: len(y), Verdict: NotJudged}
		if len(x) > 0 && len(y) > 0 {
			cis, _ := BootstrapQuantileDiffs(x, y, CompareQuantiles, c.Resamples, c.Level, rngFor("compare/"+name))
			worse, better := false, false
			for i, q := range CompareQuantiles {
				qc := compareQuantile(q, base.samples[name], next.samples[name], cis[i], o)
				qc.Judged = name != StageServerDeleteTime && judged(base, next, name, q)
				if qc.Judged {
					qc.DetectableNS = max(qc.DiffNS-qc.CILoNS, qc.CIHiNS-qc.DiffNS, int64(relevantChange(qc.BaseNS, o)))
				} else {
					qc.Need = int(math.Ceil(MinTailTrials/(1-q) - 1e-9))
				}
				mc.Changes = append(mc.Changes, qc)
				if !qc.counts() {
					continue
				}
				if qc.DiffNS > 0 {
					worse = true
				} else {
					better = true
				}
			}
			switch {
			case name == StageServerDeleteTime:
				// 1 s cross-check: its quantisation is not a change.
			case worse:
				mc.Verdict = Worse
			case better:
				mc.Verdict = Better
			default:
				mc.Verdict = Same
			}
		}
		c.Metrics = append(c.Metrics, mc)
	}
	return c
}

// judged reports whether a verdict may rest on quantile q of metric in both
// runs: enough trials above it (Judged), and its rank held by a measured
// trial in each, not by one cut at the hold.
func judged(base, next *Summary, metric string, q float64) bool {
	x, y := base.samples[metric], next.samples[metric]
	if x.n() == 0 || y.n() == 0 || !Judged(q, x.n(), y.n()) {
		return false
	}
	for _, s := range []*sample{x, y} {
		if _, lower := s.rank(quantileRank(q, s.n())); lower {
			return false
		}
	}
	return true
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
	bq, _ := x.rank(quantileRank(q, x.n()))
	nq, _ := y.rank(quantileRank(q, y.n()))
	qc := QuantileChange{Quantile: q, BaseNS: int64(bq), NewNS: int64(nq), DiffNS: int64(nq - bq)}
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
// quantile the baseline, the new value, the difference with its interval,
// and the metric's verdict. Every line fits TextWidth columns.
func NewCompareTextReporter(c *Comparison) Reporter {
	return NewCompareTextReporterWidth(c, TextWidth)
}

// NewCompareTextReporterWidth is NewCompareTextReporter for a terminal
// width columns wide (<= 0: no limit); a metric name too long for a
// narrow terminal goes on a line of its own above its quantiles.
func NewCompareTextReporterWidth(c *Comparison, width int) Reporter {
	return func(w io.Writer) error {
		e := &errWriter{w: w}
		cols := []column{{head: "metric", left: true}, {head: "n0", roomy: 3}, {head: "n1", roomy: 3}, {head: "q", roomy: 4},
			{head: "baseline", roomy: 8, group: 1}, {head: "new", roomy: 8, group: 1}, {head: "Δ", roomy: 8, group: 1}, {head: "Δ%", roomy: 6},
			{head: trimFloat(c.Level*100) + "%" + " CI of Δ", left: true, roomy: 22}, {head: "detectable", roomy: 11}, {head: "verdict", left: true}}
		var rows [][]string
		for _, m := range c.Metrics {
			if len(m.Changes) == 0 {
				rows = append(rows, []string{m.Metric, fmt.Sprint(m.NBase), fmt.Sprint(m.NNew), "", "-", "-", "-", "", "", "", string(m.Verdict)})
				continue
			}
			for i, qc := range m.Changes {
				name, verdict := "", ""
				if i == 0 {
					name, verdict = m.Metric, string(m.Verdict)
				}
				mark := " "
				if qc.counts() {
					mark = "*"
				} else if !qc.Judged {
					mark = "~"
				}
				rel := "-"
				if qc.BaseNS != 0 {
					rel = fmt.Sprintf("%+.0f%%", qc.Rel*100)
				}
				ci := fmt.Sprintf("%s[%s, %s]", mark, signedDur(qc.CILoNS), signedDur(qc.CIHiNS))
				detect := "±" + fmtDur(qc.DetectableNS)
				if !qc.Judged {
					detect = "-"
					if qc.Need > 0 && m.Metric != StageServerDeleteTime {
						detect = fmt.Sprintf("needs n=%d", qc.Need)
					}
				}
				rows = append(rows, []string{name, fmt.Sprint(m.NBase), fmt.Sprint(m.NNew), "p" + trimFloat(qc.Quantile*100),
					fmtDur(qc.BaseNS), fmtDur(qc.NewNS), signedDur(qc.DiffNS), rel, ci, detect, verdict})
			}
		}
		for _, l := range layoutTable(cols, rows, width, " ") {
			e.printf("%s\n", l)
		}
		lineWidth := width
		if lineWidth <= 0 {
			lineWidth = TextWidth
		}
		// para prints a paragraph wrapped to the terminal, its later lines
		// indented by two.
		para := func(text string) {
			for i, l := range wrap(strings.Fields(text), " ", lineWidth-2) {
				if i > 0 {
					l = "  " + l
				}
				e.printf("%s\n", l)
			}
		}
		e.printf("\n")
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
			para(fmt.Sprintf("%s: %s", v, strings.Join(names, ", ")))
		}
		e.printf("\n")
		para("n0, n1: trials of the baseline and the new run whose stages for the metric are valid.")
		para(fmt.Sprintf("%d tests made (metric × judged quantile); each interval is at %s = 1 − %s/%d, so that two runs of one setup call anything worse or better with at most %s chance (Bonferroni; seeded bootstrap, %d resamples).",
			c.Tests, trimFloat(c.Level*100)+"%", pct(FamilyError), max(c.Tests, 1), pct(FamilyError), c.Resamples))
		para(fmt.Sprintf("* a change whose interval excludes 0 and that reaches max(%s, %s%% of the baseline): only such changes make a verdict.",
			c.Options.MinChange, trimFloat(c.Options.MinChangeRel*100)))
		para(fmt.Sprintf("~ not judged: fewer than %d trials of a run lie above this quantile (n·(1−q) < %d), or it falls on a trial cut at the hold.",
			MinTailTrials, MinTailTrials))
		para(`detectable: the smallest change of that quantile these run sizes could have called worse or better; "same" means no change that large, not no change.`)
		return e.err
	}
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

// Breach is one threshold a run broke.
type Breach struct {
	Metric string `json:"metric"`
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
}

// String renders a breach as "rule: metric: detail".
func (b Breach) String() string { return fmt.Sprintf("%s: %s: %s", b.Rule, b.Metric, b.Detail) }

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
// breach: a gate must not pass for want of evidence.
func (t Thresholds) Check(next *Summary, c *Comparison) []Breach {
	var out []Breach
	for _, name := range orderMetrics(keys(t.MaxP99)) {
		limit := t.MaxP99[name]
		d, ok := next.Dist(name)
		switch {
		case !ok:
			out = append(out, Breach{name, "max-p99", fmt.Sprintf("no valid trial measured it (limit %s)", limit)})
		case time.Duration(d.P99NS) > limit:
			out = append(out, Breach{name, "max-p99", fmt.Sprintf("p99 %s > %s (n=%d)", fmtDur(d.P99NS), limit, d.N)})
		}
	}
	if t.MaxRegression > 0 && c != nil {
		for _, m := range c.Metrics {
			if m.Verdict != Worse {
				continue
			}
			for _, qc := range m.Changes {
				if qc.counts() && qc.DiffNS > 0 && (qc.BaseNS <= 0 || qc.Rel > t.MaxRegression) {
					out = append(out, Breach{m.Metric, "max-regression", fmt.Sprintf("p%s %s → %s (%+.0f%% > %s%%, %s%% CI of Δ %s … %s)",
						trimFloat(qc.Quantile*100), fmtDur(qc.BaseNS), fmtDur(qc.NewNS), qc.Rel*100, trimFloat(t.MaxRegression*100),
						trimFloat(c.Level*100)+"%", signedDur(qc.CILoNS), signedDur(qc.CIHiNS))})
					break
				}
			}
		}
	}
	return out
}

func keys(m map[string]time.Duration) []string { return slices.Collect(maps.Keys(m)) }
