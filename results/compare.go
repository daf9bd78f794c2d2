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
	"unicode/utf8"
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

// CompareLevel is the confidence level of a comparison's intervals. A
// comparison asks one question per metric, and about five groups of them
// move independently (API server, EndpointSlice controller, ingress, node,
// probe); at 95% per metric, one comparison in five of two identical setups
// would call something a change. 99% is that 5% family-wise rate, split
// over the five groups (Bonferroni).
const CompareLevel = 0.99

// CompareResamples is the bootstrap size of a comparison: at 99% each tail
// holds 25 of 5000 resamples.
const CompareResamples = 5000

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
	// both runs, CompareResamples resamples, CompareLevel).
	CILoNS int64 `json:"ci_lo_ns"`
	CIHiNS int64 `json:"ci_hi_ns"`
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
	Metrics []MetricChange `json:"metrics"`
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
	for _, name := range orderMetrics(names) {
		x, _ := base.Samples(name)
		y, _ := next.Samples(name)
		mc := MetricChange{Metric: name, NBase: len(x), NNew: len(y), Verdict: NotJudged}
		if len(x) > 0 && len(y) > 0 {
			sx, sy := sortedCopy(x), sortedCopy(y)
			cis, _ := BootstrapQuantileDiffs(x, y, CompareQuantiles, CompareResamples, CompareLevel, rngFor("compare/"+name))
			worse, better := false, false
			for i, q := range CompareQuantiles {
				qc := compareQuantile(q, sx, sy, cis[i], o)
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

// orderMetrics puts names in report order: Points, then Deltas, then the
// rest as given.
func orderMetrics(names []string) []string {
	rank := map[string]int{}
	for i, p := range Points {
		rank[p] = i
	}
	for i, d := range Deltas {
		rank[d.Name()] = len(Points) + i
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

func compareQuantile(q float64, sx, sy []float64, ci Interval, o CompareOptions) QuantileChange {
	bq, _ := Quantile(q, sx)
	nq, _ := Quantile(q, sy)
	qc := QuantileChange{Quantile: q, BaseNS: int64(bq), NewNS: int64(nq), DiffNS: int64(nq - bq)}
	if bq != 0 {
		qc.Rel = (nq - bq) / math.Abs(bq)
	}
	qc.CILoNS, qc.CIHiNS = int64(ci.Lo), int64(ci.Hi)
	qc.Significant = ci.Lo > 0 || ci.Hi < 0
	minimum := max(float64(o.MinChange), o.MinChangeRel*math.Abs(bq))
	qc.Relevant = math.Abs(nq-bq) >= minimum
	qc.Judged = Judged(q, len(sx), len(sy))
	return qc
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
// and the metric's verdict.
func NewCompareTextReporter(c *Comparison) Reporter {
	return func(w io.Writer) error {
		e := &errWriter{w: w}
		width := len("metric")
		for _, m := range c.Metrics {
			width = max(width, utf8.RuneCountInString(m.Metric))
		}
		pad := func(s string) string { return s + strings.Repeat(" ", width-utf8.RuneCountInString(s)) }
		e.printf("%s %3s %3s %4s %8s %8s %8s %6s  %-21s  %s\n", pad("metric"), "n0", "n1", "q", "baseline", "new", "Δ", "Δ%", trimFloat(CompareLevel*100)+"% CI of Δ", "verdict")
		for _, m := range c.Metrics {
			if len(m.Changes) == 0 {
				line := fmt.Sprintf("%s %3d %3d %4s %8s %8s %8s %6s  %-21s  %s", pad(m.Metric), m.NBase, m.NNew, "", "-", "-", "-", "", "", m.Verdict)
				e.printf("%s\n", strings.TrimRight(line, " "))
				continue
			}
			for i, qc := range m.Changes {
				name, verdict := pad(""), ""
				if i == 0 {
					name, verdict = pad(m.Metric), string(m.Verdict)
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
				ci := fmt.Sprintf("[%s, %s]", signedDur(qc.CILoNS), signedDur(qc.CIHiNS))
				line := fmt.Sprintf("%s %3d %3d %4s %8s %8s %8s %6s %s%-21s  %s", name, m.NBase, m.NNew,
					"p"+trimFloat(qc.Quantile*100), fmtDur(qc.BaseNS), fmtDur(qc.NewNS), signedDur(qc.DiffNS), rel, mark, ci, verdict)
				e.printf("%s\n", strings.TrimRight(line, " "))
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
			e.printf("\n%s: %s", v, strings.Join(names, ", "))
		}
		e.printf("\n")
		e.printf("\nn0, n1: valid trials of the baseline and the new run.")
		e.printf("\n* a change whose %s%% interval excludes 0 and that reaches max(%s, %s%% of the baseline):\n  only such changes make a verdict.\n~ not judged: fewer than %d trials of a run lie above this quantile (n·(1−q) < %d).\n",
			trimFloat(CompareLevel*100), c.Options.MinChange, trimFloat(c.Options.MinChangeRel*100), MinTailTrials, MinTailTrials)
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
						trimFloat(CompareLevel*100), signedDur(qc.CILoNS), signedDur(qc.CIHiNS))})
					break
				}
			}
		}
	}
	return out
}

func keys(m map[string]time.Duration) []string { return slices.Collect(maps.Keys(m)) }
