package results

import (
	"math"
	"slices"
)

// The tail test: does the new run put more trials into the upper tail than
// the baseline? It is what lets compare see, at 20–60 trials, a regression
// that only some deletions suffer (a slow mode, windows cut at the hold),
// which no bootstrap of a p95 or p99 can: at these sizes those are the
// largest trial or two, and a resample never reaches above the maximum.
//
// Both runs are pooled and sorted. For every K up to a quarter of the pool whose
// K-th largest value is strictly above the next (so that "the K largest"
// is a threshold on values, not a choice among ties), count how many of
// the K largest are the new run's: under "same distribution" the two runs'
// trials are exchangeable, so given the pool that count is
// Hypergeometric(N, K, n1), and P(count ≥ seen) is Fisher's exact one-sided
// p-value for that threshold. The thresholds are functions of the pool
// alone (never of which run a value came from), which is what makes the
// margins of every 2×2 table fixed and the test exact; a threshold from
// the baseline alone is not (the baseline's own maximum is then never
// exceeded by the baseline). The statistic is the smallest of those
// p-values, over every threshold, so one test serves a slow mode in 5% of
// deletions and a shift of the whole upper half alike; its own p-value is
// the exact probability, over every way of labelling the pool, that some
// threshold reaches a p-value that small (tailPValue: a walk down the
// sorted pool, dynamic programming, no simulation).
//
// A censored trial enters at its seen value: its true value is at least
// that, so a censored trial above a threshold is an exceedance whatever it
// would have been — evidence of a regression, not a reason to withhold
// the verdict. Under "same distribution" with the same hold, seen values
// are as exchangeable as true ones, so the test stays exact.

// TailChange is the tail test of one metric.
type TailChange struct {
	// K is how many of the pooled trials lie above ThresholdNS; BaseAbove
	// and NewAbove split them between the runs (censored trials included,
	// at their seen value; BaseCensored and NewCensored of them were cut at
	// the hold).
	ThresholdNS  int64 `json:"threshold_ns"`
	K            int   `json:"k"`
	BaseAbove    int   `json:"base_above"`
	NewAbove     int   `json:"new_above"`
	BaseCensored int   `json:"base_censored_above,omitempty"`
	NewCensored  int   `json:"new_censored_above,omitempty"`
	// Quantile is where the change is sized: the pooled quantile of the
	// threshold, 1 − K/N, or, when the new run has trials cut at the hold
	// and the change is larger there, the quantile of its lowest cut trial
	// (see tailTest). BaseNS and NewNS are each run's empirical
	// Quantile-quantile, BaseLower and NewLower set when it is a floor (it
	// falls on a censored trial), and Rel is their relative change.
	Quantile  float64 `json:"quantile"`
	BaseNS    int64   `json:"base_ns"`
	NewNS     int64   `json:"new_ns"`
	BaseLower bool    `json:"base_lower,omitempty"`
	NewLower  bool    `json:"new_lower,omitempty"`
	Rel       float64 `json:"rel"`
	// P is the test's exact p-value (the smallest Fisher p over every
	// threshold, itself calibrated over every labelling of the pool); Alpha
	// is the share of the family error the test runs at.
	P     float64 `json:"p"`
	Alpha float64 `json:"alpha"`
	// Significant: P ≤ Alpha. Relevant: NewNS − BaseNS reaches the least
	// relevant change (see CompareOptions), BaseNS not a floor (against a
	// floor the change is only an upper bound).
	Significant bool `json:"significant"`
	Relevant    bool `json:"relevant"`
	// NotJudged is NotJudgedFewTrials when no labelling of a pool this
	// size could reach Alpha (see tailScan): the test is not made, and
	// Need is the least run size, both runs alike, at which it is.
	NotJudged string `json:"not_judged,omitempty"`
	Need      int    `json:"need,omitempty"`
	// TiedNS is the value every pooled trial ties at when there is no
	// threshold (K is 0: a constant metric).
	TiedNS int64 `json:"tied_ns,omitempty"`
}

// counts reports whether the tail test makes the metric worse.
func (t *TailChange) counts() bool { return t != nil && t.Significant && t.Relevant }

// judged reports whether the tail test was made.
func (t *TailChange) judged() bool { return t != nil && t.NotJudged == "" }

// tailTest runs the tail test on base x and new y (each a sample: values
// with censoring); ok is false when either run is empty.
func tailTest(x, y *sample, alpha float64, o CompareOptions) (TailChange, bool) {
	n0, n1 := x.n(), y.n()
	if n0 == 0 || n1 == 0 {
		return TailChange{}, false
	}
	type item struct {
		v        float64
		isNew    bool
		censored bool
	}
	pool := make([]item, 0, n0+n1)
	for i, v := range x.values {
		pool = append(pool, item{v, false, x.censored[i]})
	}
	for i, v := range y.values {
		pool = append(pool, item{v, true, y.censored[i]})
	}
	// Descending; the order within ties does not matter (only thresholds
	// between distinct values are used).
	slices.SortStableFunc(pool, func(a, b item) int {
		switch {
		case a.v > b.v:
			return -1
		case a.v < b.v:
			return 1
		}
		return 0
	})
	n := len(pool)
	kmax, ok := tailScan(n, n1, alpha)
	if !ok {
		return TailChange{Alpha: alpha, P: 1, NotJudged: NotJudgedFewTrials}, true
	}
	ks := tailThresholds(pool, func(a item) float64 { return a.v }, kmax)
	newAbove := make([]int, n+1)
	for i, it := range pool {
		newAbove[i+1] = newAbove[i]
		if it.isNew {
			newAbove[i+1]++
		}
	}
	best, bestK := 2.0, 0
	for _, k := range ks {
		if p := hyperUpperTail(n, k, n1, newAbove[k]); p < best {
			best, bestK = p, k
		}
	}
	t := TailChange{Alpha: alpha, P: 1}
	if bestK == 0 {
		// No threshold: every value tied (a constant metric). The test is
		// made (nothing can lie above anything), and says at what.
		t.TiedNS = int64(pool[0].v)
		return t, true
	}
	t.K = bestK
	t.ThresholdNS = int64(pool[bestK].v)
	for _, it := range pool[:bestK] {
		switch {
		case it.isNew:
			t.NewAbove++
			if it.censored {
				t.NewCensored++
			}
		default:
			t.BaseAbove++
			if it.censored {
				t.BaseCensored++
			}
		}
	}
	t.P = tailPValue(n, n1, ks, best)
	t.sizeAt(x, y, 1-float64(bestK)/float64(n))
	if y.nCens > 0 {
		// Where the new run's trials were cut at the hold, its tail moved
		// to at least the hold: the change at its lowest cut trial's
		// quantile is a floor of the change there, and when it is the
		// larger, it is the size of the regression. The threshold's
		// quantile can lie below every cut trial (three of 20 cut, the
		// best threshold at p77 where the new run is uncut): sized there
		// alone, a tail that reached the hold read as +13%.
		at := TailChange{}
		at.sizeAt(x, y, float64(n1-y.nCens+1)/float64(n1))
		if !at.BaseLower && at.NewNS-at.BaseNS > t.NewNS-t.BaseNS {
			t.Quantile, t.BaseNS, t.NewNS, t.BaseLower, t.NewLower, t.Rel = at.Quantile, at.BaseNS, at.NewNS, at.BaseLower, at.NewLower, at.Rel
		}
	}
	t.Significant = t.P <= alpha
	t.Relevant = !t.BaseLower && float64(t.NewNS-t.BaseNS) >= relevantChange(t.BaseNS, o)
	return t, true
}

// sizeAt sets the change at quantile q of base x and new y: each run's
// empirical q-quantile, whether it is a floor, and their relative change.
func (t *TailChange) sizeAt(x, y *sample, q float64) {
	bq, baseLower := x.rank(quantileRank(q, x.n()))
	nq, lower := y.rank(quantileRank(q, y.n()))
	t.Quantile, t.BaseNS, t.NewNS, t.BaseLower, t.NewLower = q, int64(bq), int64(nq), baseLower, lower
	t.Rel = 0
	if bq != 0 {
		t.Rel = (nq - bq) / math.Abs(bq)
	}
}

// tailThresholds are the K (1 ≤ K ≤ kmax: the upper quarter of the pool,
// the tail, or more where tailScan says so) whose K-th largest value of
// the pool (descending) is strictly above the (K+1)-th: "the K largest" is
// then "every value above the (K+1)-th", a threshold that does not depend
// on which run a value came from. When a block of tied values straddles
// kmax — trials cut at exactly the hold, as many as a quarter of the pool
// or more — the end of that block is a threshold too: without it a run
// with that many trials cut would be judged only above them (by the few
// values, if any, of a longer hold in the baseline), and cutting more
// trials would make a regression invisible. It too is a function of the
// pool alone, so the test stays exact.
func tailThresholds[T any](desc []T, v func(T) float64, kmax int) []int {
	var ks []int
	for k := 1; k < len(desc); k++ {
		if v(desc[k-1]) <= v(desc[k]) {
			continue
		}
		ks = append(ks, k)
		if k >= kmax {
			break
		}
	}
	return ks
}

// tailScan is how far down a pool of n trials, m of them new, the tail
// test looks: the upper quarter (kmax = n/4) when some labelling of the
// pool could reach alpha there, else the whole pool (kmax = n−1: every
// split of the pool, an exact rank test; all 5 new trials above all 5 of
// the baseline has p = 1/C(10,5) = 1/252), else none (ok false: no
// outcome at all could reach alpha, the run is too small to judge). The
// choice depends on n, m and alpha only, never on the values, so each
// test stays exact. Reachability is that of the most extreme labelling
// (every new trial above every baseline one, all values distinct): it has
// the smallest p-value at every threshold at once.
func tailScan(n, m int, alpha float64) (kmax int, ok bool) {
	for _, k := range []int{n / 4, n - 1} {
		if k >= 1 && tailReach(n, m, k) <= alpha*(1+1e-9) {
			return k, true
		}
	}
	return 0, false
}

// tailReach is the tail test's smallest possible p-value on a pool of n
// distinct values, m of them new, scanning thresholds 1…kmax.
func tailReach(n, m, kmax int) float64 {
	ks := make([]int, kmax)
	pmin := 1.0
	for i := range ks {
		ks[i] = i + 1
		pmin = min(pmin, hyperUpperTail(n, i+1, m, min(i+1, m)))
	}
	return tailPValue(n, m, ks, pmin)
}

// hyperUpperTail is P(X ≥ c) for X ~ Hypergeometric(n, k, m): k draws
// without replacement from n items of which m are marked. The first term
// from the log binomials (gonum's combin has no hypergeometric
// distribution; math.Lgamma is exact enough for n in the thousands), the
// next ones by the ratio of successive terms,
// pmf(x+1)/pmf(x) = (m−x)(k−x) / ((x+1)(n−m−k+x+1)): one exp a call, not
// one a term (the drift test makes this call tens of thousands of times
// a history).
func hyperUpperTail(n, k, m, c int) float64 {
	hi := min(k, m)
	lo := max(c, k-(n-m), 0)
	if lo > hi {
		return 0
	}
	logC := func(a, b int) float64 {
		la, _ := math.Lgamma(float64(a + 1))
		lb, _ := math.Lgamma(float64(b + 1))
		lab, _ := math.Lgamma(float64(a - b + 1))
		return la - lb - lab
	}
	den := logC(n, k)
	first := logC(m, lo) + logC(n-m, k-lo) - den
	sum := 0.0
	if first < -700 {
		// The first term underflows while later ones may not: one exp a
		// term, in log space.
		for x := lo; x <= hi; x++ {
			sum += math.Exp(logC(m, x) + logC(n-m, k-x) - den)
		}
		return min(sum, 1)
	}
	term := math.Exp(first)
	for x := lo; x <= hi; x++ {
		sum += term
		term *= float64((m-x)*(k-x)) / float64((x+1)*(n-m-k+x+1))
	}
	return min(sum, 1)
}

// tailPValue is the exact probability that, with m of n pooled trials
// labelled new uniformly at random (every labelling equally likely: the
// runs are exchangeable), some threshold K of ks has
// hyperUpperTail(n, K, m, count of new among the K largest) ≤ pmin. The
// labels read down the sorted pool are a walk: after j trials with c new,
// the next is new with probability (m−c)/(n−j). The walk's distribution is
// carried step by step and the mass that crosses a threshold's critical
// count is taken out (it has rejected); what was taken out is the p-value.
func tailPValue(n, m int, ks []int, pmin float64) float64 {
	if len(ks) == 0 {
		return 1
	}
	// crit[K] is the smallest count at threshold K whose p-value reaches
	// pmin (a relative slack of 1e-9 absorbs the rounding of the sums, so
	// the observed count itself always counts).
	crit := map[int]int{}
	for _, k := range ks {
		c := min(k, m) + 1
		for c > 0 && hyperUpperTail(n, k, m, c-1) <= pmin*(1+1e-9) {
			c--
		}
		crit[k] = c
	}
	last := ks[len(ks)-1]
	prob := make([]float64, m+2)
	prob[0] = 1
	rejected := 0.0
	for j := 0; j < last; j++ {
		next := make([]float64, m+2)
		for c := 0; c <= min(j, m); c++ {
			if prob[c] == 0 {
				continue
			}
			pNew := float64(m-c) / float64(n-j)
			next[c+1] += prob[c] * pNew
			next[c] += prob[c] * (1 - pNew)
		}
		prob = next
		if c0, ok := crit[j+1]; ok {
			for c := c0; c <= min(j+1, m); c++ {
				rejected += prob[c]
				prob[c] = 0
			}
		}
	}
	return min(rejected, 1)
}
