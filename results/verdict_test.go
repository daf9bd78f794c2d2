package results

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The verdict defects of issue 28 (compare): each test here failed before
// its fix.

// uniformWindows draws windows of 0.5–2 s: a healthy ingress's.
var uniformWindows = shape{name: "0.5–2 s", hold: time.Minute, draw: func(rng *rand.Rand) time.Duration {
	return time.Duration(0.5e9 + rng.Float64()*1.5e9)
}}

// cutRun is windowRun over uniformWindows with its first cut trials cut at
// exactly the hold: every one of them the same seen value, as a run whose
// traffic never stopped within --hold records them.
func cutRun(seed uint64, n, cut int) *Summary {
	s := NewSummary(&Header{Kind: KindHeader, Schema: SchemaVersion, HoldNS: int64(time.Minute)}, Options{})
	for _, r := range windowRun(seed, n, uniformWindows, 0, 0).Records() {
		if r.Trial <= cut {
			r.Valid = false
			r.Reasons = []Reason{{Code: ReasonHoldReached, Detail: "traffic went on past the hold (1m0s)"}}
			var st []Stage
			for _, s := range r.Stages {
				if s.Name != StageLastRequest {
					st = append(st, s)
				}
			}
			r.Stages = append(st, Stage{Name: StageLastRequest, At: r.T0.Add(time.Minute), OffsetNS: int64(time.Minute), Clock: ClockTool})
		}
		s.Add(r)
	}
	s.Close()
	return s
}

// Item 1: when more than a quarter of the pool ties at the top (trials cut
// at exactly the hold), the tie block itself is the threshold. The power
// must grow with the number of cut trials: 1…n of n new trials cut, against
// a baseline that never passed 2 s — once the window is worse, more cut
// trials keep it worse, and the p-value never rises.
func TestTailTopTieBlockIsAThreshold(t *testing.T) {
	for _, n := range []int{20, 40} {
		base := cutRun(uint64(900+n), n, 0)
		prevP, firstWorse := 2.0, 0
		for cut := 1; cut <= n; cut++ {
			m, _ := Compare(base, cutRun(uint64(901+n), n, cut), CompareOptions{}).Metric(PointWindow)
			if m.Tail == nil {
				t.Fatalf("n=%d, %d cut: no tail test", n, cut)
			}
			p := m.Tail.P
			if p > prevP*(1+1e-9) {
				t.Errorf("n=%d: %d cut gives p=%.3g, above %.3g at %d cut: power is not monotone in the cut trials", n, cut, p, prevP, cut-1)
			}
			prevP = p
			switch {
			case m.Verdict == Worse && firstWorse == 0:
				firstWorse = cut
			case m.Verdict != Worse && firstWorse > 0:
				t.Errorf("n=%d: %d cut is %q (p=%.3g, K=%d), but %d cut was worse", n, cut, m.Verdict, p, m.Tail.K, firstWorse)
			}
		}
		t.Logf("n=%d: worse from %d cut trials on", n, firstWorse)
		// The audit's cases: half of the run cut is worse, and so is more.
		if firstWorse == 0 || firstWorse > n/2 {
			t.Errorf("n=%d: worse first at %d cut trials, want by %d", n, firstWorse, n/2)
		}
	}
}

// Item 7: the share of the family error each test runs at is fixed before
// the data are read: a censored p50 (more than half the new run cut at the
// hold) must not hand its share to the tail test.
func TestAllotDoesNotDependOnCensoring(t *testing.T) {
	base := cutRun(31, 20, 0)
	plain := Compare(base, cutRun(32, 20, 2), CompareOptions{})
	censored := Compare(base, cutRun(32, 20, 12), CompareOptions{})
	mp, _ := plain.Metric(PointWindow)
	mc, _ := censored.Metric(PointWindow)
	if plain.Tests != censored.Tests || plain.WindowAlpha != censored.WindowAlpha || mp.Tail.Alpha != mc.Tail.Alpha {
		t.Errorf("tests %d, window %g, tail %g with p50 measured; %d, %g, %g with it censored: the split moved with the data",
			plain.Tests, plain.WindowAlpha, mp.Tail.Alpha, censored.Tests, censored.WindowAlpha, mc.Tail.Alpha)
	}
}

// Item 5: a baseline value at the tail row's quantile that falls on a
// trial cut at the hold is a floor, and the row says so; the difference is
// then only an upper bound and cannot be relevant.
func TestTailBaselineFloorMarked(t *testing.T) {
	// The baseline: 8 of 20 cut at the hold. The new run: 2 of 20 cut, its
	// other 18 all above the baseline's measured ones.
	base := cutRun(41, 20, 8)
	next := NewSummary(&Header{Kind: KindHeader, Schema: SchemaVersion, HoldNS: int64(time.Minute)}, Options{})
	for _, r := range cutRun(42, 20, 2).Records() {
		if r.Trial > 2 {
			for i, s := range r.Stages {
				if s.Name == StageLastRequest {
					off := 2500*time.Millisecond + time.Duration(r.Trial)*10*time.Millisecond
					r.Stages[i].OffsetNS, r.Stages[i].At = int64(off), r.T0.Add(off)
				}
			}
		}
		next.Add(r)
	}
	next.Close()
	c := Compare(base, next, CompareOptions{})
	m, _ := c.Metric(PointWindow)
	if m.Tail == nil || !m.Tail.BaseLower {
		t.Fatalf("tail %+v: want the baseline's value a floor", m.Tail)
	}
	if m.Tail.Relevant {
		t.Errorf("tail relevant against a baseline floor: %+v", m.Tail)
	}
	var buf bytes.Buffer
	if err := NewCompareTextReporter(c)(&buf); err != nil {
		t.Fatal(err)
	}
	row := tailRow(t, buf.String(), PointWindow)
	if !strings.Contains(row, "≥"+fmtDur(m.Tail.BaseNS)) {
		t.Errorf("tail row %q does not mark the baseline's %s as a floor", row, fmtDur(m.Tail.BaseNS))
	}
}

// tailRow is the last row of metric's block in a compare text report.
func tailRow(t *testing.T, text, metric string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, metric+":") {
			row := ""
			for _, r := range lines[i+1:] {
				if !strings.HasPrefix(r, "  ") {
					break
				}
				row = r
			}
			return row
		}
	}
	t.Fatalf("no block for %s in\n%s", metric, text)
	return ""
}

// shiftedRun is windowRun over uniformWindows, every window plus shift.
func shiftedRun(seed uint64, n int, shift time.Duration) *Summary {
	return windowRun(seed, n, shape{name: "shifted", hold: time.Minute, draw: func(rng *rand.Rand) time.Duration {
		return uniformWindows.draw(rng) + shift
	}}, 0, 0)
}

// Item 3: tiny runs. At 5 trials a run every window 30 s later is worse
// (where the upper quarter of the pool cannot reach the test's share, the
// whole pool is scanned: all 5 new trials above all 5 of the baseline has
// p = 1/252). At 3 trials a run nothing can be judged (1/20 is above any
// share): the metric says so and how many trials it needs, and a
// --max-regression gate cannot tell, instead of passing.
func TestCompareTinyRuns(t *testing.T) {
	c := Compare(shiftedRun(51, 5, 0), shiftedRun(52, 5, 30*time.Second), CompareOptions{})
	if m, _ := c.Metric(PointWindow); m.Verdict != Worse {
		t.Errorf("5 trials a run, +30 s: window %q (tail %+v), want worse", m.Verdict, m.Tail)
	}
	tiny := shiftedRun(54, 3, 30*time.Second)
	c = Compare(shiftedRun(53, 3, 0), tiny, CompareOptions{})
	m, _ := c.Metric(PointWindow)
	if m.Verdict != NotJudged || m.NotJudged != NotJudgedFewTrials || m.Need <= 3 {
		t.Fatalf("3 trials a run: window %q, not judged %q, needs %d; want n/a for few trials, needing more than 3", m.Verdict, m.NotJudged, m.Need)
	}
	// The need is the least run size at which the window is judged.
	at := Compare(shiftedRun(55, m.Need, 0), shiftedRun(56, m.Need, 30*time.Second), CompareOptions{})
	if w, _ := at.Metric(PointWindow); w.Verdict != Worse {
		t.Errorf("at the %d trials the report asks for, +30 s is %q, want worse", m.Need, w.Verdict)
	}
	below := Compare(shiftedRun(55, m.Need-1, 0), shiftedRun(56, m.Need-1, 30*time.Second), CompareOptions{})
	if w, _ := below.Metric(PointWindow); w.Verdict != NotJudged {
		t.Errorf("at %d trials, one fewer than asked for, the window is %q, want not judged", m.Need-1, w.Verdict)
	}
	var buf bytes.Buffer
	if err := NewCompareTextReporter(c)(&buf); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("window: not judged: n too small (needs n=%d)", m.Need); !strings.Contains(buf.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, buf.String())
	}
	bs := Thresholds{MaxRegression: 0.2}.Check(tiny, c)
	if !OnlyCannotTell(bs) || !hasBreach(bs, PointWindow) {
		t.Errorf("--max-regression on 3 trials a run: breaches %v, want only cannot-tell ones, the window among them", bs)
	}
}

// Item 2: a gate never passes on no evidence. A new run that measured no
// window (every trial's probe clock invalid) against a baseline that did:
// --max-regression cannot tell.
func TestRegressionGateWithoutEvidence(t *testing.T) {
	base := shiftedRun(61, 20, 0)
	next := NewSummary(base.Header, Options{})
	for _, r := range shiftedRun(62, 20, 0).Records() {
		r.Valid = false
		r.Reasons = []Reason{{Code: ReasonSkewMissing}}
		next.Add(r)
	}
	next.Close()
	c := Compare(base, next, CompareOptions{})
	bs := Thresholds{MaxRegression: 0.2}.Check(next, c)
	if !OnlyCannotTell(bs) || !hasBreach(bs, PointWindow) {
		t.Errorf("no window in the new run: breaches %v, want the window's cannot-tell", bs)
	}
}

func hasBreach(bs []Breach, metric string) bool {
	for _, b := range bs {
		if b.Metric == metric {
			return true
		}
	}
	return false
}
