package results

import (
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"
)

// Quantile estimator. stat.Empirical returns the smallest sample x with
// (number of samples ≤ x)/n ≥ p: always an observed value, never an
// interpolation below the data. For a preStop recommendation that is the
// conservative choice (a linear interpolation would report a p99 that no
// trial reached and that one trial in the sample exceeded). Its price: for
// n < 100 the p99 is the sample maximum, which the reports say.
const quantileKind = stat.Empirical

// Quantile is the p-quantile of sorted (ascending) by the empirical
// estimator; ok is false for an empty sample.
func Quantile(p float64, sorted []float64) (q float64, ok bool) {
	if len(sorted) == 0 {
		return 0, false
	}
	return stat.Quantile(p, quantileKind, sorted, nil), true
}

// sortedCopy returns an ascending copy of x: callers keep their order.
func sortedCopy(x []float64) []float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s
}

// BootstrapResamples is how many resamples a confidence interval draws: at
// 2000 the Monte-Carlo error of a 95% percentile interval's endpoints is
// small against the sampling error of a few dozen trials.
const BootstrapResamples = 2000

// ConfidenceLevel is the level of every confidence interval reported.
const ConfidenceLevel = 0.95

// Interval is a confidence interval.
type Interval struct {
	Lo, Hi float64
	Level  float64
}

// rngFor returns a generator seeded by name: the same file renders the same
// report, and adding a stage does not shift another stage's interval.
func rngFor(name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	s := h.Sum64()
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// resampler draws bootstrap resamples of a sample as a count per element
// of its sorted copy. A resample's sorted order is then the index order, so
// its empirical quantiles come from one O(n) scan instead of a sort — the
// same values stat.Quantile(p, stat.Empirical, sortedResample, nil) gives.
type resampler struct {
	sorted []float64
	counts []int32
}

func newResampler(x []float64) *resampler {
	return &resampler{sorted: sortedCopy(x), counts: make([]int32, len(x))}
}

// draw makes a new resample of n elements with replacement.
func (r *resampler) draw(rng *rand.Rand) {
	clear(r.counts)
	n := len(r.sorted)
	for range n {
		r.counts[rng.IntN(n)]++
	}
}

// quantiles writes the resample's empirical quantile of each of ps
// (ascending) into out, with gonum's rule: the first element at which the
// running count reaches p·n.
func (r *resampler) quantiles(ps, out []float64) {
	n := float64(len(r.sorted))
	var cum float64
	k := 0
	for j, c := range r.counts {
		if c == 0 {
			continue
		}
		cum += float64(c)
		for k < len(ps) && cum >= ps[k]*n {
			out[k] = r.sorted[j]
			k++
		}
		if k == len(ps) {
			return
		}
	}
}

// BootstrapQuantile is the percentile-bootstrap confidence interval of the
// p-quantile of x (any order): resample x with replacement b times, take
// each resample's p-quantile, and report the central level fraction of
// those. ok is false for an empty sample.
func BootstrapQuantile(x []float64, p float64, b int, level float64, rng *rand.Rand) (Interval, bool) {
	if len(x) == 0 || b <= 0 {
		return Interval{}, false
	}
	stats := make([]float64, b)
	rs := newResampler(x)
	ps, q := []float64{p}, []float64{0}
	for i := range stats {
		rs.draw(rng)
		rs.quantiles(ps, q)
		stats[i] = q[0]
	}
	return percentileInterval(stats, level), true
}

// BootstrapQuantileDiff is the percentile-bootstrap confidence interval of
// quantile_p(y) − quantile_p(x), resampling both independently.
func BootstrapQuantileDiff(x, y []float64, p float64, b int, level float64, rng *rand.Rand) (Interval, bool) {
	cis, ok := BootstrapQuantileDiffs(x, y, []float64{p}, b, level, rng)
	if !ok {
		return Interval{}, false
	}
	return cis[0], true
}

// BootstrapQuantileDiffs is BootstrapQuantileDiff for several quantiles
// (ascending) from the same resamples.
func BootstrapQuantileDiffs(x, y []float64, ps []float64, b int, level float64, rng *rand.Rand) ([]Interval, bool) {
	if len(x) == 0 || len(y) == 0 || b <= 0 || len(ps) == 0 || !slices.IsSorted(ps) {
		return nil, false
	}
	stats := make([][]float64, len(ps))
	for i := range stats {
		stats[i] = make([]float64, b)
	}
	rx, ry := newResampler(x), newResampler(y)
	qx, qy := make([]float64, len(ps)), make([]float64, len(ps))
	for i := 0; i < b; i++ {
		rx.draw(rng)
		ry.draw(rng)
		rx.quantiles(ps, qx)
		ry.quantiles(ps, qy)
		for k := range ps {
			stats[k][i] = qy[k] - qx[k]
		}
	}
	out := make([]Interval, len(ps))
	for k := range ps {
		out[k] = percentileInterval(stats[k], level)
	}
	return out, true
}

func percentileInterval(stats []float64, level float64) Interval {
	slices.Sort(stats)
	alpha := (1 - level) / 2
	return Interval{
		Lo:    stat.Quantile(alpha, quantileKind, stats, nil),
		Hi:    stat.Quantile(1-alpha, quantileKind, stats, nil),
		Level: level,
	}
}

// Dist is the distribution of one quantity over the valid trials, in
// nanoseconds. Percentiles use the empirical estimator (see Quantile).
type Dist struct {
	Name string `json:"name"`
	N    int    `json:"n"`
	// P50NS … MaxNS are zero when N is 0.
	P50NS int64 `json:"p50_ns"`
	P90NS int64 `json:"p90_ns"`
	P95NS int64 `json:"p95_ns"`
	P99NS int64 `json:"p99_ns"`
	MinNS int64 `json:"min_ns"`
	MaxNS int64 `json:"max_ns"`
	// MaxUncertaintyNS is the largest error bound any sample carried (skew
	// bound, poll interval, 1 s for metav1.Time); points only.
	MaxUncertaintyNS int64 `json:"max_uncertainty_ns,omitempty"`
}

// newDist summarises samples (nanoseconds, any order).
func newDist(name string, samples []float64) Dist {
	d := Dist{Name: name, N: len(samples)}
	if d.N == 0 {
		return d
	}
	s := sortedCopy(samples)
	q := func(p float64) int64 { v, _ := Quantile(p, s); return int64(v) }
	d.P50NS, d.P90NS, d.P95NS, d.P99NS = q(0.50), q(0.90), q(0.95), q(0.99)
	d.MinNS, d.MaxNS = int64(s[0]), int64(s[len(s)-1])
	return d
}

// Percentile returns the named percentile (50, 90, 95, 99, 100 for max).
func (d Dist) Percentile(p int) (time.Duration, bool) {
	if d.N == 0 {
		return 0, false
	}
	switch p {
	case 50:
		return time.Duration(d.P50NS), true
	case 90:
		return time.Duration(d.P90NS), true
	case 95:
		return time.Duration(d.P95NS), true
	case 99:
		return time.Duration(d.P99NS), true
	case 100:
		return time.Duration(d.MaxNS), true
	}
	return 0, false
}
