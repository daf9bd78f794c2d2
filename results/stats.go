package results

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mathext"
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

// BootstrapQuantileDiffs is the percentile-bootstrap confidence interval of
// quantile_p(y) − quantile_p(x) for each p of ps (ascending), resampling both
// runs independently, every quantile from the same resamples. Only compare
// uses it: the recommendation's bound comes from order statistics.
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

// sample is one metric's values over the trials whose stages it needs are
// valid, with the trials they came from and which of them are censored
// (the trial ran into the hold: the value is a floor).
type sample struct {
	values   []float64
	trials   []int
	censored []bool
	ranked   []float64 // see rankOrder; built on first use
	seen     []float64 // see seenOrder; built on first use
	nCens    int
}

func (s *sample) add(trial int, v float64, censored bool) {
	s.values = append(s.values, v)
	s.trials = append(s.trials, trial)
	s.censored = append(s.censored, censored)
	s.ranked, s.seen = nil, nil
	if censored {
		s.nCens++
	}
}

func (s *sample) n() int {
	if s == nil {
		return 0
	}
	return len(s.values)
}

// rankOrder arranges the values for order statistics with censoring: the
// uncensored ones ascending, then the censored ones (ascending by their
// floors). A censored trial's true value is unknown above its floor, so it
// ranks above every measured one. This keeps each order statistic honest:
// at a rank held by a measured value, the k-th measured value is at least
// the true k-th order statistic (k measured values lie at or below it), so
// an upper bound stays an upper bound; at a rank held by a censored value,
// the value shown is at most the true one (at least k − measured censored
// floors lie below the true k-th), so it is reported as a lower bound.
func (s *sample) rankOrder() []float64 {
	if s.ranked == nil {
		var meas, cens []float64
		for i, v := range s.values {
			if s.censored[i] {
				cens = append(cens, v)
			} else {
				meas = append(meas, v)
			}
		}
		slices.Sort(meas)
		slices.Sort(cens)
		s.ranked = append(meas, cens...)
	}
	return s.ranked
}

// rank is the k-th order statistic (1-based) and whether it is only a
// floor. A rank held by a measured trial is the k-th measured value (see
// rankOrder). A rank above the measured trials is the k-th of all values
// sorted with the censored ones at their seen value: every true value is at
// least its seen one, so the true k-th order statistic is at least that —
// and, unlike the k−m-th censored floor, it is never below a measured trial
// that is larger (a trial cut early by a listing can have a small floor).
func (s *sample) rank(k int) (v float64, lower bool) {
	r := s.rankOrder()
	k = min(max(k, 1), len(r))
	if k <= len(r)-s.nCens {
		return r[k-1], false
	}
	return s.seenOrder()[k-1], true
}

// seenOrder is every value ascending, censored ones at their seen value:
// the order the floors and the tail test read.
func (s *sample) seenOrder() []float64 {
	if s.seen == nil {
		s.seen = sortedCopy(s.values)
	}
	return s.seen
}

// quantileRank is the empirical estimator's rank of the p-quantile of n
// values: the smallest k with k ≥ p·n (gonum's stat.Empirical rule).
func quantileRank(p float64, n int) int {
	k := int(math.Ceil(p * float64(n)))
	return min(max(k, 1), n)
}

// Dist is the distribution of one quantity over the trials whose stages it
// needs are valid, in nanoseconds. Percentiles use the empirical estimator
// (see Quantile) over the ranking of rankOrder: a percentile whose rank
// falls on a censored trial is a floor (see Lower).
type Dist struct {
	Name string `json:"name"`
	N    int    `json:"n"`
	// Censored counts the trials among N that ran into the hold.
	Censored int `json:"censored,omitempty"`
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
	// Bound is the upper confidence bound of the run's quantile (see
	// Bound); nil when N is 0.
	Bound *Bound `json:"bound,omitempty"`
}

// newDist summarises a sample and bounds its q-quantile at conf.
func newDist(name string, s *sample, q, conf float64) Dist {
	d := Dist{Name: name, N: s.n()}
	if d.N == 0 {
		return d
	}
	d.Censored = s.nCens
	at := func(p float64) int64 { v, _ := s.rank(quantileRank(p, d.N)); return int64(v) }
	d.P50NS, d.P90NS, d.P95NS, d.P99NS = at(0.50), at(0.90), at(0.95), at(0.99)
	d.MinNS, d.MaxNS = int64(s.rankOrder()[0]), int64(slices.Max(s.values))
	if b, ok := newBound(s, q, conf); ok {
		d.Bound = &b
	}
	return d
}

// Lower reports whether the p-percentile (1 for the maximum) is only a
// floor: its rank falls on a censored trial.
func (d Dist) Lower(p float64) bool {
	return d.Censored > 0 && quantileRank(p, d.N) > d.N-d.Censored
}

// ExactBootstrapQuantileDiffs is the percentile-bootstrap confidence
// interval of quantile_p(y) − quantile_p(x) for each p of ps, computed from
// the bootstrap distribution itself instead of from resamples: a
// resample's empirical p-quantile is its k-th smallest value (k = ⌈p·n⌉),
// and it is at most the j-th distinct value v_j exactly when at least k of
// the n draws are, which happens with probability P(Binomial(n, F(v_j)) ≥
// k), F being the sample's share at or below v_j. The two runs are
// resampled independently, so the difference's distribution is the
// product of the two over every pair of values. It is the limit of
// BootstrapQuantileDiffs as the resamples grow: deterministic, no
// simulation error in the tails a small test level reads, and O(n0·n1)
// instead of O(B·n).
func ExactBootstrapQuantileDiffs(x, y []float64, ps []float64, level float64) ([]Interval, bool) {
	if len(x) == 0 || len(y) == 0 || len(ps) == 0 {
		return nil, false
	}
	sx, sy := sortedCopy(x), sortedCopy(y)
	out := make([]Interval, len(ps))
	for i, p := range ps {
		dx, dy := quantileLaw(sx, p), quantileLaw(sy, p)
		type point struct{ d, w float64 }
		pts := make([]point, 0, len(dx)*len(dy))
		for _, a := range dy {
			for _, b := range dx {
				if w := a.w * b.w; w > 0 {
					pts = append(pts, point{a.v - b.v, w})
				}
			}
		}
		slices.SortFunc(pts, func(a, b point) int {
			switch {
			case a.d < b.d:
				return -1
			case a.d > b.d:
				return 1
			}
			return 0
		})
		total := 0.0
		for _, pt := range pts {
			total += pt.w
		}
		// stat.Empirical's rule on the distribution: the smallest value
		// whose cumulative share reaches the level.
		at := func(q float64) float64 {
			cum := 0.0
			for _, pt := range pts {
				cum += pt.w / total
				if cum >= q-1e-12 {
					return pt.d
				}
			}
			return pts[len(pts)-1].d
		}
		alpha := (1 - level) / 2
		out[i] = Interval{Lo: at(alpha), Hi: at(1 - alpha), Level: level}
	}
	return out, true
}

// weighted is a value and its probability.
type weighted struct{ v, w float64 }

// quantileLaw is the distribution of a bootstrap resample's empirical
// p-quantile of sorted (ascending): per distinct value, its probability.
func quantileLaw(sorted []float64, p float64) []weighted {
	n := len(sorted)
	k := quantileRank(p, n)
	var out []weighted
	prev := 0.0 // P(quantile ≤ previous distinct value)
	for j := 0; j < n; j++ {
		if j+1 < n && sorted[j+1] == sorted[j] {
			continue // the last of a run of ties carries its share
		}
		var atMost float64 // P(Binomial(n, F) ≥ k)
		if f := float64(j+1) / float64(n); f >= 1 {
			atMost = 1
		} else {
			// P(Binomial(n, f) ≥ k) = I_f(k, n−k+1), the regularised
			// incomplete beta: one continued fraction, not a sum of k terms.
			atMost = mathext.RegIncBeta(float64(k), float64(n-k+1), f)
		}
		if w := atMost - prev; w > 0 {
			out = append(out, weighted{sorted[j], w})
		}
		prev = atMost
	}
	return out
}
