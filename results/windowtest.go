package results

import "math"

// windowTest judges the window metric of y against x at level alpha,
// with compare's tests split as compare splits the window's share (allot):
// the tail test at alpha/2 and each quantile judged at these sizes at
// alpha/2 over their number (the tail test alone at alpha when none is).
// It is Compare's verdict on PointWindow at that level, computed from the
// two samples alone: the drift test makes it at every run of a history,
// where a whole Compare (every metric, every interval) would cost a
// hundred times more.
func windowTest(x, y *sample, alpha float64, o CompareOptions) Verdict {
	n0, n1 := x.n(), y.n()
	if n0 == 0 || n1 == 0 {
		return NotJudged
	}
	central := 0
	for _, q := range CompareQuantiles {
		if Judged(q, n0, n1) {
			central++
		}
	}
	tAlpha, qAlpha := alpha, 0.0
	if central > 0 {
		tAlpha, qAlpha = alpha/2, alpha/2/float64(central)
	}
	worse, better, made := false, false, false
	if central > 0 {
		sx, sy := x.seenOrder(), y.seenOrder()
		for _, q := range CompareQuantiles {
			if !Judged(q, n0, n1) {
				continue
			}
			bq, bl := x.rank(quantileRank(q, n0))
			nq, nl := y.rank(quantileRank(q, n1))
			if bl || nl {
				continue // on a trial cut at the hold: the tail test reads it
			}
			made = true
			up, down := quantileShift(sx, sy, q, qAlpha)
			if (!up && !down) || math.Abs(nq-bq) < relevantChange(int64(bq), o) {
				continue
			}
			worse = worse || up
			better = better || down
		}
	}
	if t, ok := tailTest(x, y, tAlpha, o); ok {
		worse = worse || t.counts()
		made = made || t.judged()
	}
	switch {
	case !made:
		return NotJudged
	case worse:
		return Worse
	case better:
		return Better
	}
	return Same
}

// quantileShift is ExactBootstrapQuantileDiffs' significance at level
// 1 − alpha for quantile q of sorted samples x and y, without building
// the interval: with D the difference of the resamples' q-quantiles
// (y − x), the interval lies above 0 (up) when P(D ≤ 0) is under alpha/2,
// and below 0 (down) when P(D < 0) reaches 1 − alpha/2 (the interval's
// rule: the smallest value whose cumulative share reaches the level, with
// the same 1e-12 slack). Both sums run over the two laws' distinct
// values, ascending, in one pass.
func quantileShift(x, y []float64, q, alpha float64) (up, down bool) {
	lx, ly := quantileLaw(x, q), quantileLaw(y, q)
	// geX[i], gtX[i]: P(X* ≥ ly[i].v) and P(X* > ly[i].v).
	le, lt := 0.0, 0.0 // P(D ≤ 0), P(D < 0)
	// tail sums of lx from index i on
	suffix := make([]float64, len(lx)+1)
	for i := len(lx) - 1; i >= 0; i-- {
		suffix[i] = suffix[i+1] + lx[i].w
	}
	i := 0
	for _, b := range ly {
		for i < len(lx) && lx[i].v < b.v {
			i++
		}
		ge := suffix[i]
		gt := ge
		if i < len(lx) && lx[i].v == b.v {
			gt = suffix[i+1]
		}
		le += b.w * ge
		lt += b.w * gt
	}
	a := alpha / 2
	return le < a-1e-12, lt >= 1-a-1e-12
}
