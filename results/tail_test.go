package results

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tailPValue against brute force: every labelling of small pools (with
// ties) enumerated, the share whose smallest threshold p-value is at most
// the observed one. Exactness is what lets the tail test run at its share
// of the family error without simulation.
func TestTailPValueMatchesEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 30 {
		n0, n1 := 3+rng.IntN(5), 3+rng.IntN(5)
		n := n0 + n1
		vals := make([]float64, n)
		for i := range vals {
			vals[i] = float64(rng.IntN(6)) // heavy ties
		}
		slices.SortFunc(vals, func(a, b float64) int { return int(b - a) })
		// The upper quarter, or the whole pool (tailScan's two
		// scans); with heavy ties the top block is often past n/4.
		ks := tailThresholds(vals, func(v float64) float64 { return v }, []int{n / 4, n - 1}[trial%2])
		minP := func(isNew []bool) float64 {
			best := 1.0
			for _, k := range ks {
				c := 0
				for _, b := range isNew[:k] {
					if b {
						c++
					}
				}
				best = min(best, hyperUpperTail(n, k, n1, c))
			}
			return best
		}
		// Every labelling with n1 new, by bit masks.
		var all []float64
		for mask := 0; mask < 1<<n; mask++ {
			if popcount(mask) != n1 {
				continue
			}
			isNew := make([]bool, n)
			for i := range n {
				isNew[i] = mask&(1<<i) != 0
			}
			all = append(all, minP(isNew))
		}
		for _, observed := range []float64{all[0], all[len(all)/2], all[len(all)-1]} {
			want := 0
			for _, p := range all {
				if p <= observed*(1+1e-9) {
					want++
				}
			}
			got := tailPValue(n, n1, ks, observed)
			if math.Abs(got-float64(want)/float64(len(all))) > 1e-9 {
				t.Errorf("pool %d (%v, %d new): p-value of %g = %g, enumeration gives %d/%d", trial, vals, n1, observed, got, want, len(all))
			}
		}
	}
}

func popcount(x int) int {
	c := 0
	for ; x > 0; x &= x - 1 {
		c++
	}
	return c
}

// shape draws one trial's window (and whether it ran into the hold).
type shape struct {
	name string
	hold time.Duration
	draw func(rng *rand.Rand) time.Duration
}

var (
	lognormal = shape{name: "lognormal", hold: time.Minute, draw: func(rng *rand.Rand) time.Duration {
		return time.Duration(1.5e9 * math.Exp(0.6*rng.NormFloat64()))
	}}
	bimodal = shape{name: "bimodal", hold: time.Minute, draw: func(rng *rand.Rand) time.Duration {
		if rng.IntN(5) == 0 {
			return time.Duration(3e9 + rng.Float64()*2e9)
		}
		return time.Duration(0.2e9 + rng.Float64()*1e9)
	}}
	// pollTies: Skipper's poll seen through a 250 ms observer: a few
	// distinct values, every one of them shared by many trials.
	pollTies = shape{name: "poll-quantised ties", hold: time.Minute, draw: func(rng *rand.Rand) time.Duration {
		return time.Duration(250+250*rng.IntN(5)) * time.Millisecond
	}}
	// censoredTail: windows of 20 s median, 1 in 7 beyond the 60 s hold.
	censoredTail = shape{name: "censored at the hold", hold: time.Minute, draw: func(rng *rand.Rand) time.Duration {
		return time.Duration(20e9 * math.Exp(rng.NormFloat64()))
	}}
)

// windowRun is a run whose trials carry only the traffic end
// (last_request: two metrics, last_request and window, as alike as two
// stages that share a path), drawn from s plus slow with probability
// pSlow; a window beyond the hold is cut there (hold_reached). Two
// metrics, not the two dozen of a real run, keep the hundreds of seeded
// comparisons within seconds: the split of the family error is proved for
// any number of tests (allot), and the simulation checks the tests under it.
func windowRun(seed uint64, n int, s shape, pSlow float64, slow time.Duration) *Summary {
	rng := rand.New(rand.NewPCG(seed, 11))
	sum := NewSummary(&Header{Kind: KindHeader, Schema: SchemaVersion, HoldNS: int64(s.hold)}, Options{})
	for i := 1; i <= n; i++ {
		t0 := synthStart.Add(time.Duration(i) * time.Minute)
		r := Record{Kind: KindTrial, Trial: i, Valid: true, T0: t0, Pod: fmt.Sprintf("p-%d", i)}
		add := func(name string, off time.Duration) {
			r.Stages = append(r.Stages, Stage{Name: name, At: t0.Add(off), OffsetNS: int64(off), Clock: ClockTool})
		}
		add(StageDeleteSent, 0)
		snr := time.Duration(15+rng.IntN(45)) * time.Millisecond
		w := s.draw(rng)
		if rng.Float64() < pSlow {
			w += slow
		}
		if w >= s.hold {
			r.Valid = false
			r.Reasons = []Reason{{Code: ReasonHoldReached, Detail: "test"}}
			add(StageLastRequest, s.hold)
		} else {
			add(StageLastRequest, snr+w)
		}
		sum.Add(&r)
	}
	sum.Close()
	return sum
}

// anyFlagged reports whether a comparison called any metric worse or
// better.
func anyFlagged(c *Comparison) bool {
	for _, m := range c.Metrics {
		if m.Verdict == Worse || m.Verdict == Better {
			return true
		}
	}
	return false
}

// Two runs of one setup: compare calls anything worse or better in at most
// 5% of pairs, for every shape the windows take — skewed, bimodal, a
// handful of tied values (where an exceedance count could be fooled by
// where ties fall), and a tail cut at the hold (censored trials tie at
// their seen value). This is the family-wise error the verdicts promise,
// at run sizes people use (20 and 40) and below. The pairs are seeded, so the counts
// are the same on every run; the bound is the promise itself, not a
// tolerance around it (the weighted Bonferroni split is conservative: the
// counts seen when this was written were well below it).
func TestCompareFamilyWiseFalseAlarms(t *testing.T) {
	const pairs = 100
	for _, s := range []shape{lognormal, bimodal, pollTies, censoredTail} {
		// 5 and 8: runs small enough that the tail test scans the whole
		// pool (tailScan); 20 and 40: the sizes people run.
		for _, n := range []int{5, 8, 20, 40} {
			flagged := 0
			for i := range pairs {
				seed := uint64(10_000*n + 2*i)
				c := Compare(windowRun(seed, n, s, 0, 0), windowRun(seed+1, n, s, 0, 0), CompareOptions{})
				if anyFlagged(c) {
					flagged++
				}
			}
			t.Logf("%s, n=%d: %d of %d same-distribution pairs flagged", s.name, n, flagged, pairs)
			if float64(flagged) > FamilyError*pairs {
				t.Errorf("%s, n=%d: %d of %d pairs of one setup called changed; the family-wise promise is ≤ %s",
					s.name, n, flagged, pairs, pct(FamilyError))
			}
		}
	}
}

// A controller upgrade that makes 10% of deletions 30 s slower. No
// distribution-free two-sample test can call this reliably at 40 trials a
// run with the share of the family error the window's tail test gets:
// with S slow trials, all in the new run, the labellings that put all S
// there have probability C(40,S)/C(80,S) ≈ 2^−S under "same", and S ~
// Binomial(40, 0.1) is 4 on average (TestTailPowerBound computes the best
// possible rate). So the test holds compare to the run size where 80% is
// reachable by the tail test and names it (docs/compare.md): 120 trials a
// run (92% when this was written; 78% at 100), and logs the rate at 40
// (about 20%).
func TestCompareSeesSlowModeInTail(t *testing.T) {
	const pairs = 60
	rate := func(n int) (worse int) {
		for i := range pairs {
			seed := uint64(50_000 + 1000*n + 2*i)
			base := windowRun(seed, n, lognormal, 0, 0)
			next := windowRun(seed+1, n, lognormal, 0.10, 30*time.Second)
			if m, _ := Compare(base, next, CompareOptions{}).Metric(PointWindow); m.Verdict == Worse {
				worse++
			}
		}
		return worse
	}
	w40, w80 := rate(40), rate(SlowModeTrials)
	t.Logf("+30 s in 10%% of deletions called worse: n=40 in %d of %d pairs, n=%d in %d of %d", w40, pairs, SlowModeTrials, w80, pairs)
	if float64(w80) < 0.8*pairs {
		t.Errorf("n=%d: a 10%% slow mode called worse in %d of %d pairs, want ≥ 80%%", SlowModeTrials, w80, pairs)
	}
	if w40 >= w80 {
		t.Errorf("power at 40 trials (%d) is not below that at %d (%d): the test ignores the run size", w40, SlowModeTrials, w80)
	}
}

// SlowModeTrials is the run size at which compare calls a +30 s slow mode
// in 10% of deletions worse in at least 80% of pairs (docs/compare.md).
const SlowModeTrials = 120

// The best any test can do against a 10% +30 s slow mode, when it must
// keep false alarms at alpha for every distribution: against the null
// where both runs draw the slow mode with 5% (the pooled count S of slow
// trials then has nearly the law it has under the alternative), the
// Neyman–Pearson test rejects for the largest S with all slow trials in
// the new run, randomising at the boundary. At 40 trials a run and the
// window tail test's share of the family error this is below 80%: no test
// that keeps compare's promise reaches it, which is why
// TestCompareSeesSlowModeInTail asks for 80% at SlowModeTrials instead.
func TestTailPowerBound(t *testing.T) {
	bound := func(n int, alpha float64) float64 {
		binom := func(k, n int, p float64) float64 {
			lc, _ := math.Lgamma(float64(n + 1))
			la, _ := math.Lgamma(float64(k + 1))
			lb, _ := math.Lgamma(float64(n - k + 1))
			return math.Exp(lc - la - lb + float64(k)*math.Log(p) + float64(n-k)*math.Log1p(-p))
		}
		power, size := 0.0, 0.0
		for s := n; s >= 1; s-- {
			h1 := binom(s, n, 0.10)                                  // S slow, all new
			h0 := binom(s, 2*n, 0.05) * hyperUpperTail(2*n, s, n, s) // S slow, all landing in the new run
			if size+h0 <= alpha {
				size, power = size+h0, power+h1
				continue
			}
			return power + h1*(alpha-size)/h0
		}
		return power
	}
	tail, _, _ := allot(1, 1, 24) // a real run: the window's p50 and tail, two dozen other tests
	b40 := bound(40, tail)
	t.Logf("best possible power against +30 s in 10%% of deletions: n=40 %.2f at the window tail's %s, %.2f at the whole %s; n=%d %.2f at %s",
		b40, pctFine(tail), bound(40, FamilyError), pct(FamilyError), SlowModeTrials, bound(SlowModeTrials, tail), pctFine(tail))
	if b40 >= 0.8 {
		t.Errorf("bound at n=40 is %.2f: 80%% is reachable, the tail test should be held to it", b40)
	}
}

// 11 of 20 new trials cut at a 60 s hold, against a baseline that never
// passed 2 s: the censored trials are exceedances, not a reason to withhold
// the verdict, and --max-regression 20% is breached for certain.
// The pair is also written (go test -update) as testdata/tail-base.jsonl
// and tail-new.jsonl, which the compare command's test reads; the test
// runs on what was read back.
func TestCompareCensoredRegression(t *testing.T) {
	b0, n0 := censoredPair()
	if *update {
		for name, s := range map[string]*Summary{"tail-base.jsonl": b0, "tail-new.jsonl": n0} {
			var trials []Record
			for _, r := range s.Records() {
				trials = append(trials, *r)
			}
			if err := os.WriteFile(filepath.Join("testdata", name), writeRun(t, s.Header, trials, s.Doc()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	base, next := load(t, "tail-base.jsonl"), load(t, "tail-new.jsonl")
	c := Compare(base, next, CompareOptions{})
	m, _ := c.Metric(PointWindow)
	if m.Verdict != Worse || !m.Tail.counts() {
		t.Fatalf("window verdict %q (tail %+v), want worse by the tail test", m.Verdict, m.Tail)
	}
	// The tail test scans the upper quarter of the 40 pooled trials: the
	// 10 largest, every one of them a censored trial of the new run.
	if tl := m.Tail; tl.K != 10 || tl.NewCensored != tl.K || tl.BaseAbove != 0 {
		t.Errorf("tail: %d above the threshold, %d of them censored, %d of the baseline; want 10, 10 and 0", tl.K, tl.NewCensored, tl.BaseAbove)
	}
	bs := Thresholds{MaxRegression: 0.2}.Check(next, c)
	found := false
	for _, b := range bs {
		if b.Metric == PointWindow && b.Rule == "max-regression" && !b.CannotTell {
			found = true
		}
	}
	if !found {
		t.Errorf("--max-regression 20%%: breaches %v, want a certain one on window", bs)
	}
}

// censoredPair is the baseline (20 trials, windows 0.5–2 s) and the new run
// (20 trials, 11 cut at a 60 s hold, the rest like the baseline) of
// TestCompareCensoredRegression, also written as files for the compare
// command's test (testdata/censored-*.jsonl).
func censoredPair() (base, next *Summary) {
	uniform := shape{name: "0.5–2 s", hold: time.Minute, draw: func(rng *rand.Rand) time.Duration {
		return time.Duration(0.5e9 + rng.Float64()*1.5e9)
	}}
	base = windowRun(71, 20, uniform, 0, 0)
	// 11 of 20 slow, by construction, not by chance.
	rng := rand.New(rand.NewPCG(72, 11))
	next = NewSummary(&Header{Kind: KindHeader, Schema: SchemaVersion, HoldNS: int64(time.Minute)}, Options{})
	for _, r := range windowRun(72, 20, uniform, 0, 0).Records() {
		if r.Trial <= 11 {
			r.Valid = false
			r.Reasons = []Reason{{Code: ReasonHoldReached, Detail: "traffic went on past the hold (1m0s)"}}
			var st []Stage
			for _, s := range r.Stages {
				if s.Name != StageUpstreamRemoved && s.Name != StageLastRequest {
					st = append(st, s)
				}
			}
			off := time.Minute - time.Duration(rng.IntN(100))*time.Millisecond
			r.Stages = append(st, Stage{Name: StageLastRequest, At: r.T0.Add(off), OffsetNS: int64(off), Clock: ClockTool})
		}
		next.Add(r)
	}
	next.Close()
	return base, next
}

// heldRun is a run of n windows U(1, 2) s, held at hold, its first cut
// trials cut at exactly the hold (a trial still routed when the hold
// ended is seen at the hold).
func heldRun(seed uint64, n, cut int, hold time.Duration) *Summary {
	k := 0
	s := shape{name: "U(1,2) s", hold: hold, draw: func(rng *rand.Rand) time.Duration {
		k++
		if k <= cut {
			return hold
		}
		return time.Duration(1e9 + rng.Float64()*1e9)
	}}
	return windowRun(seed, n, s, 0, 0)
}

// A tail regression is sized where the tail moved: a few trials cut at a
// 60 s hold against a baseline that never passed 2 s are a regression to
// at least the hold at the new run's cut quantile, not the few percent of
// the pooled threshold's quantile (where the new run is uncut). The
// issue's pairs, over 40 seeds each: every pair called worse breaches
// --max-regression 20% for certain (exit 3). Whether a pair is worse at
// all is the tail test's power (3 of 20 cut: only when the uncut trials
// also lean high; 8 of 40: nearly always), printed.
func TestCompareSizesTailRegressionWhereItMoved(t *testing.T) {
	for _, tc := range []struct{ n, cut, minWorse int }{{20, 3, 1}, {40, 8, 30}, {40, 7, 15}} {
		worse := 0
		for seed := range uint64(40) {
			base := heldRun(100+seed, tc.n, 0, time.Minute)
			next := heldRun(200+seed, tc.n, tc.cut, time.Minute)
			c := Compare(base, next, CompareOptions{})
			m, _ := c.Metric(PointWindow)
			if m.Verdict != Worse {
				continue
			}
			worse++
			if !certainRegression(c, next) {
				t.Errorf("%d of %d cut, seed %d, worse: --max-regression 20%% not breached for certain; tail sized at p%.0f %s → %s (%+.0f%%)",
					tc.cut, tc.n, seed, 100*m.Tail.Quantile, fmtDur(m.Tail.BaseNS), fmtDur(m.Tail.NewNS), 100*m.Tail.Rel)
			}
		}
		t.Logf("%d of %d cut at the hold: worse in %d of 40 seeds", tc.cut, tc.n, worse)
		if worse < tc.minWorse {
			t.Errorf("%d of %d cut: worse in %d of 40 seeds, want at least %d: the check above tested too little", tc.cut, tc.n, worse, tc.minWorse)
		}
	}
}

// Power is monotone in the number of trials cut: a baseline held for 120 s
// with one window at 90 s (above every cut trial of the new run, which was
// held for 60 s) against 10, 15 or 20 of 20 cut at 60 s. The tied block of
// cut trials straddles the upper quarter of the pool; its end is a
// threshold, so more cut trials never read as less evidence.
func TestTailPowerMonotoneInCutTrials(t *testing.T) {
	base := heldRun(300, 20, 0, 2*time.Minute)
	// One window of 90 s among the baseline's.
	recs := base.Records()
	b := NewSummary(base.Header, Options{})
	for i, r := range recs {
		if i == 0 {
			for k := range r.Stages {
				if r.Stages[k].Name == StageLastRequest {
					r.Stages[k].OffsetNS = int64(90 * time.Second)
					r.Stages[k].At = r.T0.Add(90 * time.Second)
				}
			}
		}
		b.Add(r)
	}
	b.Close()
	prev := 1.0
	for _, cut := range []int{10, 15, 20} {
		next := heldRun(400, 20, cut, time.Minute)
		m, _ := Compare(b, next, CompareOptions{}).Metric(PointWindow)
		if m.Verdict != Worse || m.Tail.P > prev {
			t.Errorf("%d of 20 cut: window %s, tail p = %.3g (fewer cut: %.3g); want worse, p not above", cut, m.Verdict, m.Tail.P, prev)
		}
		prev = m.Tail.P
	}
}

// A constant metric has no tail threshold: its row says so, with the value
// every trial has, not "p0 … above 0.000s".
func TestTailRowOfAConstantMetric(t *testing.T) {
	constant := func() *Summary {
		s := NewSummary(&Header{Kind: KindHeader, Schema: SchemaVersion, HoldNS: int64(time.Minute)}, Options{})
		for i := 1; i <= 20; i++ {
			t0 := synthStart.Add(time.Duration(i) * time.Minute)
			s.Add(&Record{Kind: KindTrial, Trial: i, Valid: true, T0: t0, Pod: fmt.Sprintf("p-%d", i), Stages: []Stage{
				{Name: StageDeleteSent, At: t0, Clock: ClockTool},
				{Name: StageLastRequest, At: t0.Add(12 * time.Millisecond), OffsetNS: int64(12 * time.Millisecond), Clock: ClockTool},
			}})
		}
		s.Close()
		return s
	}
	base, next := constant(), constant()
	c := Compare(base, next, CompareOptions{})
	var b strings.Builder
	if err := NewCompareTextReporterWidth(c, 100)(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "p0 ") || strings.Contains(out, "above 0.000s") || !strings.Contains(out, "every trial") {
		t.Errorf("a constant metric's tail row:\n%s", out)
	}
}
