package results

import (
	"fmt"
	"math"
)

// Distribution-free upper confidence bounds for a quantile, from order
// statistics (DESIGN.md "Recommendation"). For n independent trials of one
// continuous quantity with q-quantile ξ_q, the number of trials at or below
// ξ_q is Binomial(n, q), so the k-th smallest trial x₍k₎ lies above ξ_q
// exactly when fewer than k trials do:
//
//	P(x₍k₎ ≥ ξ_q) = P(Binomial(n, q) < k).
//
// The bound is the smallest k for which that reaches the confidence asked.
// It holds whatever the distribution of the windows is — bimodal, heavy
// tailed, with a rare slow mode — which is why it replaces a bootstrap of
// the maximum, which cannot reach above the largest trial.

// binomialCDFs returns P(Binomial(n, p) ≤ k) for k = 0 … n−1 (the CDF at n
// is 1), each pmf
// term summed exactly in log space (n in the thousands neither overflows
// nor underflows), in one pass.
func binomialCDFs(n int, p float64) []float64 {
	out := make([]float64, max(n, 0))
	if p <= 0 || p >= 1 {
		for k := range out {
			if p <= 0 {
				out[k] = 1
			}
		}
		return out
	}
	// log pmf(0) = n·log(1−p); log pmf(i+1) = log pmf(i) + log((n−i)/(i+1)) + log(p/(1−p)).
	lp, lq := math.Log(p), math.Log1p(-p)
	logPMF := float64(n) * lq
	sum := 0.0
	for i := range out {
		sum += math.Exp(logPMF)
		out[i] = min(sum, 1)
		logPMF += math.Log(float64(n-i)/float64(i+1)) + lp - lq
	}
	return out
}

// BinomialCDF is P(Binomial(n, p) ≤ k).
func BinomialCDF(k, n int, p float64) float64 {
	switch {
	case k < 0:
		return 0
	case k >= n:
		return 1
	}
	return binomialCDFs(n, p)[k]
}

// OrderStatConfidence is P(x₍k₎ ≥ ξ_q) = P(Binomial(n, q) < k): the
// confidence with which the k-th smallest of n trials bounds the
// q-quantile from above.
func OrderStatConfidence(k, n int, q float64) float64 {
	return BinomialCDF(k-1, n, q)
}

// UpperBoundRank is the smallest k (1-based, ascending) such that x₍k₎ of n
// trials is an upper confidence bound for the q-quantile at confidence
// conf. ok is false when even the maximum (k = n) falls short: n is too
// small for q at conf (see TrialsNeeded).
func UpperBoundRank(n int, q, conf float64) (k int, ok bool) {
	for i, c := range binomialCDFs(n, q) {
		if c >= conf {
			return i + 1, true // P(Bin ≤ i) = P(Bin < i+1)
		}
	}
	return n, false
}

// MaxCoverage is the largest quantile the maximum of n trials bounds at
// confidence conf: P(max ≥ ξ_q) = 1 − qⁿ ≥ conf gives q = (1 − conf)^(1/n).
// The largest of 20 trials covers the 86th percentile at 95%.
func MaxCoverage(n int, conf float64) float64 {
	if n <= 0 {
		return 0
	}
	return math.Pow(1-conf, 1/float64(n))
}

// TrialsNeeded is the least n whose maximum bounds the q-quantile at
// confidence conf: the smallest n with 1 − qⁿ ≥ conf (59 for q = 0.95,
// 299 for q = 0.99, both at 95%).
func TrialsNeeded(q, conf float64) int {
	if q <= 0 || q >= 1 || conf <= 0 || conf >= 1 {
		return 0
	}
	n := int(math.Ceil(math.Log(1-conf) / math.Log(q)))
	// The logarithms can land a hair off an integer: settle on the exact n.
	for n > 1 && 1-math.Pow(q, float64(n-1)) >= conf {
		n--
	}
	for 1-math.Pow(q, float64(n)) < conf {
		n++
	}
	return max(n, 1)
}

// Bound is a one-sided upper confidence bound for a quantile of one metric,
// from its order statistics.
type Bound struct {
	// Quantile and Confidence are what was asked.
	Quantile   float64 `json:"quantile"`
	Confidence float64 `json:"confidence"`
	// N is the number of trials, censored ones included; K the order
	// statistic used (1-based, ascending): the smallest with
	// P(Binomial(N, Quantile) < K) ≥ Confidence, or N (the maximum) when N
	// is too small for that.
	N int `json:"n"`
	K int `json:"k"`
	// NS is x₍K₎ in nanoseconds.
	NS int64 `json:"ns"`
	// Covers is the quantile NS bounds at Confidence: Quantile when N
	// sufficed, else the maximum's coverage (1 − Confidence)^(1/N).
	Covers float64 `json:"covers"`
	// Achieved is P(Binomial(N, Quantile) < K): the confidence with which NS
	// bounds Quantile itself.
	Achieved float64 `json:"achieved"`
	// Need is how many trials the maximum needs to bound Quantile at
	// Confidence.
	Need int `json:"need"`
	// LowerBound is set when x₍K₎ is a censored trial: the trial ran into
	// the hold, its value is only a floor, and so is NS.
	LowerBound bool `json:"lower_bound,omitempty"`
}

// Enough reports whether the trials sufficed for the asked quantile.
func (b Bound) Enough() bool { return b.Covers >= b.Quantile }

// newBound bounds the q-quantile of sample s at confidence conf.
func newBound(s *sample, q, conf float64) (Bound, bool) {
	n := s.n()
	if n == 0 {
		return Bound{}, false
	}
	k, ok := UpperBoundRank(n, q, conf)
	b := Bound{Quantile: q, Confidence: conf, N: n, K: k, Covers: q,
		Achieved: OrderStatConfidence(k, n, q), Need: TrialsNeeded(q, conf)}
	if !ok {
		b.Covers = MaxCoverage(n, conf)
	}
	v, lower := s.rank(k)
	b.NS, b.LowerBound = int64(v), lower
	return b, true
}

// Which names the order statistic in words: "the largest of 59 trials",
// "the 2nd largest of 100 trials".
func (b Bound) Which() string {
	from := b.N - b.K + 1
	if from == 1 {
		return fmt.Sprintf("the largest of %s", plural(b.N, "trial", "trials"))
	}
	return fmt.Sprintf("the %s largest of %d trials", ordinal(from), b.N)
}

// Claim states what the bound covers, in words: "the largest of 20 trials
// covers 86% of deletions with 95% confidence"; for a floor, "at least …".
func (b Bound) Claim() string {
	if b.LowerBound {
		return fmt.Sprintf("at least %s: %s ran into the hold, so the bound that covers %s of deletions with %s confidence is at least that",
			fmtDur(b.NS), b.Which(), pct(b.Covers), pct(b.Confidence))
	}
	return fmt.Sprintf("%s covers %s of deletions with %s confidence", b.Which(), pct(b.Covers), pct(b.Confidence))
}

// pct renders 0.8609 as "86%" and 0.995 as "99.5%": rounded down to a
// tenth, so a claim never rounds itself up.
func pct(f float64) string {
	return trimFloat(math.Floor(f*1000+1e-9)/10) + "%"
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
