package results

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/stat"
)

// The empirical quantile of n sorted values is the ⌈p·n⌉-th (1-based):
// an observed value with at least a fraction p of the sample at or below it
// and less than p strictly below it.
func TestQuantileEmpiricalProperty(t *testing.T) {
	for n := 1; n <= 150; n++ {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(i * 10)
		}
		for _, p := range []float64{0.5, 0.9, 0.95, 0.99} {
			q, ok := Quantile(p, x)
			if !ok {
				t.Fatalf("n=%d: no quantile", n)
			}
			want := float64((int(math.Ceil(p*float64(n))) - 1) * 10)
			if q != want {
				t.Errorf("n=%d p=%v: q=%v, want %v", n, p, q, want)
			}
			le := float64(int(q/10)+1) / float64(n)
			lt := float64(int(q/10)) / float64(n)
			if le < p || lt >= p {
				t.Errorf("n=%d p=%v: F(q)=%v, F(q−)=%v; want F(q) ≥ p > F(q−)", n, p, le, lt)
			}
			if k := quantileRank(p, n); float64((k-1)*10) != q {
				t.Errorf("n=%d p=%v: quantileRank %d disagrees with gonum's %v", n, p, k, q)
			}
		}
	}
	if quantileRank(0.99, 99) != 99 || quantileRank(0.99, 100) != 99 || quantileRank(0.99, 20) != 20 {
		t.Error("the p99 of n < 100 is the maximum, of n = 100 it is not")
	}
}

// Against a known distribution: Exp(1) has quantile −ln(1−p). Tolerances
// are ~4 standard errors of the sample quantile, sqrt(p(1−p)/n)/f(q) with
// f(q) = 1−p: 0.007 at p50 and 0.07 at p99 for n = 20000.
func TestQuantileExponential(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	x := make([]float64, 20000)
	for i := range x {
		x[i] = rng.ExpFloat64()
	}
	orig := slices.Clone(x)
	s := sortedCopy(x)
	for _, tc := range []struct{ p, tol float64 }{{0.5, 0.03}, {0.9, 0.06}, {0.99, 0.3}} {
		q, _ := Quantile(tc.p, s)
		if want := -math.Log(1 - tc.p); math.Abs(q-want) > tc.tol {
			t.Errorf("p%v = %.4f, want %.4f ± %v", tc.p*100, q, want, tc.tol)
		}
	}
	if !slices.Equal(x, orig) {
		t.Error("sortedCopy must not reorder its input")
	}
	if !slices.IsSorted(s) || len(s) != len(x) {
		t.Error("sortedCopy must return every sample, sorted")
	}
}

func TestQuantileEmpty(t *testing.T) {
	if _, ok := Quantile(0.5, nil); ok {
		t.Error("Quantile of no samples is ok")
	}
	d := newDist("x", nil, 0.95, 0.95)
	if d.N != 0 || d.P99NS != 0 || d.Bound != nil {
		t.Errorf("empty dist = %+v", d)
	}
	if _, ok := BootstrapQuantileDiffs(nil, []float64{1}, []float64{0.5}, 100, 0.95, rngFor("x")); ok {
		t.Error("bootstrap of no samples is ok")
	}
}

func TestBootstrapSeeded(t *testing.T) {
	x := []float64{5, 1, 4, 2, 3, 9, 7}
	y := []float64{6, 2, 5, 3, 4, 10, 8}
	a, _ := BootstrapQuantileDiffs(x, y, []float64{0.5, 0.9}, 1000, 0.95, rngFor("k"))
	b, _ := BootstrapQuantileDiffs(x, y, []float64{0.5, 0.9}, 1000, 0.95, rngFor("k"))
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different intervals: %v vs %v", a, b)
	}
	for _, ci := range a {
		if ci.Lo < 2-9 || ci.Hi > 10-1 || ci.Lo > ci.Hi {
			t.Errorf("empirical bootstrap interval %v leaves the data's range", ci)
		}
	}
}

// Rates over many seeded experiments (n = 40 per run, N(μ,1)): a median
// shift of 1.5 (≈ 5 standard errors of the difference) is inside the 95%
// interval of the difference and the interval excludes 0 nearly always;
// without a shift the interval excludes 0 about 5% of the time (the
// percentile bootstrap of a median at n = 40 runs a little anti-conservative,
// hence ≤ 12%, with 100 experiments' binomial SD of 2 points).
func TestBootstrapDiffRates(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	draw := func(mu float64) []float64 {
		x := make([]float64, 40)
		for i := range x {
			x[i] = mu + rng.NormFloat64()
		}
		return x
	}
	const experiments = 100
	detected, holds, falseAlarms := 0, 0, 0
	for e := 0; e < experiments; e++ {
		base := draw(0)
		ci := diff1(base, draw(1.5), rng)
		if ci.Lo > 0 {
			detected++
		}
		if ci.Lo <= 1.5 && 1.5 <= ci.Hi {
			holds++
		}
		ci = diff1(base, draw(0), rng)
		if ci.Lo > 0 || ci.Hi < 0 {
			falseAlarms++
		}
	}
	if detected < 95 || holds < 85 || falseAlarms > 12 {
		t.Errorf("of %d: shift detected %d (want ≥ 95), shift inside the interval %d (want ≥ 85), false alarms %d (want ≤ 12)",
			experiments, detected, holds, falseAlarms)
	}
	t.Logf("of %d: shift detected %d, inside the interval %d, false alarms %d", experiments, detected, holds, falseAlarms)
}

// diff1 is the 95% interval of the median's change from x to y.
func diff1(x, y []float64, rng *rand.Rand) Interval {
	cis, _ := BootstrapQuantileDiffs(x, y, []float64{0.5}, 500, 0.95, rng)
	return cis[0]
}

// The resampler's counting quantiles are exactly gonum's empirical
// quantiles of the same resample, sorted.
func TestResamplerMatchesGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	ps := []float64{0, 0.1, 0.5, 0.9, 0.95, 0.99, 1}
	for _, n := range []int{1, 2, 7, 20, 99, 100, 101, 333} {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(rng.IntN(50)) // ties on purpose
		}
		rs := newResampler(x)
		got := make([]float64, len(ps))
		for range 50 {
			rs.draw(rng)
			rs.quantiles(ps, got)
			var res []float64
			for j, c := range rs.counts {
				for range c {
					res = append(res, rs.sorted[j])
				}
			}
			if len(res) != n {
				t.Fatalf("n=%d: resample of %d", n, len(res))
			}
			for k, p := range ps {
				if want := stat.Quantile(p, stat.Empirical, res, nil); got[k] != want {
					t.Fatalf("n=%d p=%v: %v, gonum %v", n, p, got[k], want)
				}
			}
		}
	}
}

// The exact bootstrap distribution against 20000 resamples of the same two
// samples (ties included): each interval end is within one neighbouring
// order statistic of the simulated one — the resamples' own noise at a 95%
// level is about that.
func TestExactBootstrapMatchesResampling(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	x, y := make([]float64, 25), make([]float64, 30)
	for i := range x {
		x[i] = float64(rng.IntN(40))
	}
	for i := range y {
		y[i] = float64(5 + rng.IntN(40))
	}
	ps := []float64{0.5, 0.9}
	exact, ok := ExactBootstrapQuantileDiffs(x, y, ps, 0.95)
	if !ok {
		t.Fatal("not ok")
	}
	mc, _ := BootstrapQuantileDiffs(x, y, ps, 20000, 0.95, rngFor("exact"))
	for i, p := range ps {
		if math.Abs(exact[i].Lo-mc[i].Lo) > 3 || math.Abs(exact[i].Hi-mc[i].Hi) > 3 {
			t.Errorf("p%g: exact [%g, %g], resampled [%g, %g]", p*100, exact[i].Lo, exact[i].Hi, mc[i].Lo, mc[i].Hi)
		}
	}
	t.Logf("exact %v, resampled %v", exact, mc)
}

// A floor is never below a measured trial that is larger: a trial cut
// early (an ingress still listed the pod) can have a small seen value, and
// the rank above the measured trials takes the k-th of every value at its
// seen value, not the k−m-th floor.
func TestFloorNotBelowMeasured(t *testing.T) {
	var s sample
	for i, v := range []float64{1, 2, 19} {
		s.add(i+1, v*1e9, false)
	}
	s.add(4, 5e9, true) // cut by a listing at 5 s
	if v, lower := s.rank(4); !lower || v != 19e9 {
		t.Errorf("rank 4 = %v (floor %t), want ≥ 19s, a floor", v, lower)
	}
	if v, lower := s.rank(3); lower || v != 19e9 {
		t.Errorf("rank 3 = %v (floor %t), want the measured 19s", v, lower)
	}
	d := newDist("window", &s, 0.95, 0.95)
	if !d.Lower(1) || d.MaxNS != 19e9 || d.Bound.NS != 19e9 || !d.Bound.LowerBound {
		t.Errorf("dist %+v, bound %+v: want max and U ≥ 19s, floors", d, d.Bound)
	}
}
