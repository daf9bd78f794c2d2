package results

import (
	"bytes"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// trial builds a valid trial whose traffic ends at end and whose preStop
// (if pre ≥ 0) was called at pre, SIGTERM 5 ms later.
func trial(n int, pre, end time.Duration) *Record {
	r := rec(st(StageSigterm, "", max(pre, 0)+5*time.Millisecond), st(StageLastRequest, "", end))
	if pre >= 0 {
		r.Stages = append(r.Stages, st(StagePrestopCalled, "", pre))
	}
	r.Trial = n
	return r
}

// A reason leaves out only the stages it corrupts: a broken watch keeps the
// trial's window (probe clock), an unclassified reason drops everything.
func TestSummaryPerStageValidity(t *testing.T) {
	s := NewSummary(nil, Options{})
	for i, end := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		r := trial(i+1, 0, end)
		r.Stages = append(r.Stages, st(StageSliceNotReady, "", 30*time.Millisecond))
		s.Add(r)
	}
	watch := trial(4, 0, 4*time.Second)
	watch.Stages = append(watch.Stages, st(StageSliceNotReady, "", 20*time.Second))
	watch.Valid, watch.Reasons = false, []Reason{{Code: ReasonWatchBroken, Detail: "the endpointslices watch broke"}}
	s.Add(watch)
	skew := trial(5, 0, 100*time.Second)
	skew.Stages = append(skew.Stages, st(StageSliceNotReady, "", 40*time.Millisecond))
	skew.Valid, skew.Reasons = false, []Reason{{Code: ReasonSkewBound, Detail: "±60ms"}}
	s.Add(skew)
	bad := trial(6, 0, 200*time.Second)
	bad.Valid = false
	s.Add(bad)
	s.Close()
	d := s.Doc()
	want := map[string]int{ReasonWatchBroken: 1, ReasonSkewBound: 1, ReasonUnspecified: 1}
	if d.Trials != 6 || d.Valid != 3 || !reflect.DeepEqual(d.InvalidReasons, want) {
		t.Errorf("counts: trials %d valid %d reasons %v; want 6, 3, %v", d.Trials, d.Valid, d.InvalidReasons, want)
	}
	if w, ok := s.Dist(PointWindow); !ok || w.N != 4 || w.MaxNS != int64(4*time.Second) {
		t.Errorf("window dist %+v: want the 3 valid trials and the one whose watch broke", w)
	}
	if sr, ok := s.Dist(StageSliceNotReady); !ok || sr.N != 4 || sr.MaxNS != int64(40*time.Millisecond) {
		t.Errorf("slice_not_ready dist %+v: want the 3 valid trials and the one with a skew fault", sr)
	}
	if r := s.Doc().Recommendation; r == nil || r.N != 4 || time.Duration(r.CoverNS) != 4*time.Second {
		t.Errorf("recommendation %+v: want n=4 bounded by the broken-watch trial's 4s", r)
	}
	if d.ReasonExamples[ReasonWatchBroken] != "the endpointslices watch broke" {
		t.Errorf("reason examples %v", d.ReasonExamples)
	}
}

// A trial cut at the hold stays in n and in every quantile, ranks above
// every measured trial, and turns the bound it lands on into a floor.
func TestSummaryCensored(t *testing.T) {
	build := func(n, censored int) *Summary {
		s := NewSummary(nil, Options{Quantile: 0.9, Confidence: 0.9})
		for i := 1; i <= n; i++ {
			r := trial(i, 0, time.Duration(i)*100*time.Millisecond)
			if i <= censored {
				// the first trials are cut at the hold with small floors:
				// their rank must not come from their value.
				r.Valid, r.Reasons = false, []Reason{{Code: ReasonHoldReached, Detail: "traffic went on past the hold (2s)"}}
			}
			s.Add(r)
		}
		s.Close()
		return s
	}
	s := build(30, 2)
	d := s.Doc()
	w, _ := s.Dist(PointWindow)
	if d.Censored != 2 || w.N != 30 || w.Censored != 2 {
		t.Fatalf("censored %d, window n %d censored %d: want 2 counted in n=30", d.Censored, w.N, w.Censored)
	}
	if w.Lower(0.5) || !w.Lower(1) || !w.Lower(0.99) || w.Lower(0.9) {
		t.Errorf("floors: p50 %v p90 %v p99 %v max %v; want only ranks above 28 marked", w.Lower(0.5), w.Lower(0.9), w.Lower(0.99), w.Lower(1))
	}
	// n=30, q=0.9 at 90%: P(Bin(30, 0.9) ≤ 28) = 0.816 < 0.9 ≤ P(… ≤ 29)
	// = 0.958, so k = 30, a rank held by a censored trial.
	r := d.Recommendation
	if r == nil || r.Censored != 2 || !r.LowerBound() {
		t.Fatalf("recommendation %+v: want a floor with 2 censored", r)
	}
	var buf bytes.Buffer
	if err := NewTextReporter(s)(&buf); err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(buf.String()), " ")
	for _, want := range []string{"2 censored at the hold", "preStop ≥ U(traffic end − prestop_called) + margin = ≥ ", "only floors", "Rerun with a longer hold"} {
		if !strings.Contains(flat, want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
	// Without censoring in reach of the bound, it is a plain bound.
	if r := build(100, 1).Doc().Recommendation; r.LowerBound() || r.Bound.K >= 100 {
		t.Errorf("n=100 with one censored trial: %+v; want the bound below the censored rank", r.Bound)
	}
}

func TestSummaryEmpty(t *testing.T) {
	s := NewSummary(nil, Options{})
	s.Close()
	if s.Doc().Recommendation != nil {
		t.Error("a recommendation from no trials")
	}
	if d, ok := s.Dist(PointWindow); ok || d.N != 0 {
		t.Errorf("window of no trials: %+v, %v", d, ok)
	}
	for name, newR := range Reporters {
		var buf bytes.Buffer
		if err := newR(s)(&buf); err != nil {
			t.Errorf("%s of an empty summary: %v", name, err)
		}
	}
	var buf bytes.Buffer
	if err := NewPlotReporter(s)(&buf); err != nil || !strings.Contains(buf.String(), "nothing to plot") {
		t.Errorf("plot of an empty summary: %v, %q", err, buf.String())
	}
}

func TestRecommendation(t *testing.T) {
	ms := time.Millisecond
	// Ten trials: traffic end − prestop_called = 1.0s … 1.9s; the bound of
	// ten trials is their max, 1.9 s.
	ten := func(pre time.Duration) []*Record {
		var out []*Record
		for i := 0; i < 10; i++ {
			out = append(out, trial(i+1, pre, max(pre, 0)+time.Second+time.Duration(i)*100*ms))
		}
		return out
	}
	header := &Header{Observers: []Observer{{Name: "skipper", ResolutionNS: int64(3 * time.Second)}}, DrainNS: int64(10 * time.Second)}
	tests := []struct {
		name           string
		h              *Header
		opts           Options
		trials         []*Record
		basis          string
		cover, margin  time.Duration
		prestop, grace int64
		fallback       int
		caveat         string
	}{
		{
			name: "defaults: margin 1s, headroom 5s, no drain",
			opts: Options{}, trials: ten(50 * ms), basis: StagePrestopCalled,
			cover: 1900 * ms, margin: time.Second, prestop: 3, grace: 8, caveat: "covers only 74.1% of deletions",
		},
		{
			name: "observer resolution raises the margin; drain from the header",
			h:    header, trials: ten(50 * ms), basis: StagePrestopCalled,
			cover: 1900 * ms, margin: 3 * time.Second, prestop: 5, grace: 20, caveat: "observer skipper resolution",
		},
		{
			// The header's resolution is measured before the first trial;
			// a controller that slowed down later (polls overran and the
			// tracker backed off) shows in the trials' upstream stages,
			// whose uncertainty is the resolution at the trial's end.
			name: "a coarser resolution kept during the trials raises the margin",
			h:    header, trials: slowedObserver(ten(50*ms), 4500*ms), basis: StagePrestopCalled,
			cover: 1900 * ms, margin: 4500 * ms, prestop: 7, grace: 22, caveat: "observer skipper resolution",
		},
		{
			name: "flags beat the header's drain",
			h:    header, opts: Options{Drain: 30 * time.Second, Headroom: 500 * ms, Margin: 4 * time.Second}, trials: ten(50 * ms),
			basis: StagePrestopCalled, cover: 1900 * ms, margin: 4 * time.Second, prestop: 6, grace: 37, caveat: "the least margin",
		},
		{
			name:   "no preStop hook: from SIGTERM, and said so",
			trials: ten(-1), basis: StageSigterm,
			cover: 1895 * ms, margin: time.Second, prestop: 3, grace: 8, fallback: 10, caveat: "runs from SIGTERM instead",
		},
		{
			// measure --target: the sidecar sees no preStop call or
			// SIGTERM, so the cover runs from the deletion (T0).
			name:   "the sidecar's trials: from the deletion, and said so",
			trials: sidecarTrials(ten(-1)), basis: StageDeleteSent,
			cover: 1900 * ms, margin: time.Second, prestop: 3, grace: 8, caveat: "runs from the deletion (delete_sent)",
		},
		{
			name: "deregistration delay: preStop must exceed it",
			opts: Options{DeregistrationDelay: 15 * time.Second}, trials: ten(50 * ms), basis: StagePrestopCalled,
			cover: 1900 * ms, margin: time.Second, prestop: 16, grace: 21, caveat: "covers only 74.1% of deletions",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSummary(tt.h, tt.opts)
			for _, r := range tt.trials {
				s.Add(r)
			}
			s.Close()
			r := s.Doc().Recommendation
			if r == nil {
				t.Fatal("no recommendation")
			}
			if r.Basis != tt.basis || time.Duration(r.CoverNS) != tt.cover || time.Duration(r.MarginNS) != tt.margin ||
				r.PreStopSeconds != tt.prestop || r.GraceSeconds != tt.grace || r.FallbackTrials != tt.fallback || r.N != 10 {
				t.Errorf("got basis %s cover %v margin %v preStop %ds grace %ds fallback %d n %d\nwant basis %s cover %v margin %v preStop %ds grace %ds fallback %d n 10",
					r.Basis, time.Duration(r.CoverNS), time.Duration(r.MarginNS), r.PreStopSeconds, r.GraceSeconds, r.FallbackTrials, r.N,
					tt.basis, tt.cover, tt.margin, tt.prestop, tt.grace, tt.fallback)
			}
			if r.Bound.K != 10 || r.Bound.Enough() || r.Bound.Need != 59 || math.Abs(r.Bound.Covers-math.Pow(0.05, 0.1)) > 1e-12 {
				t.Errorf("the bound of 10 trials must be the max, covering 0.05^(1/10): %+v", r.Bound)
			}
			var buf bytes.Buffer
			if err := NewTextReporter(s)(&buf); err != nil {
				t.Fatal(err)
			}
			if flat := strings.Join(strings.Fields(buf.String()), " "); !strings.Contains(flat, tt.caveat) {
				t.Errorf("report lacks %q:\n%s", tt.caveat, buf.String())
			}
			if !strings.Contains(buf.String(), "→ "+strconv.FormatInt(tt.prestop, 10)+"s") {
				t.Errorf("report lacks the preStop formula's result %ds:\n%s", tt.prestop, buf.String())
			}
		})
	}
}

// sidecarTrials makes trials as measure --target records them: the
// sidecar's account, and no preStop call or SIGTERM.
func sidecarTrials(trials []*Record) []*Record {
	for _, r := range trials {
		r.Sidecar = &SidecarTrial{IntervalNS: int64(10 * time.Millisecond)}
		r.Stages = slices.DeleteFunc(r.Stages, func(s Stage) bool { return s.Name == StageSigterm || s.Name == StagePrestopCalled })
	}
	return trials
}

// Version-1 reasons are free text: they are split and classified into
// codes, each code counted once per trial.
func TestLegacyReasonsClassified(t *testing.T) {
	s := NewSummary(nil, Options{})
	for i, reason := range []string{"no clock-skew estimate for the probe; the probe never received SIGTERM", "no clock-skew estimate for the probe",
		"", "traffic or upstream listing went on past --hold 1m0s: the window is longer than the hold", "something new"} {
		r := trial(i+1, 0, time.Second)
		r.Valid, r.Invalid = false, reason
		s.Add(r)
	}
	s.Close()
	want := map[string]int{ReasonSkewMissing: 2, ReasonNoSigterm: 1, ReasonUnspecified: 2, ReasonHoldReached: 1}
	if got := s.Doc().InvalidReasons; !reflect.DeepEqual(got, want) {
		t.Errorf("InvalidReasons = %v, want %v", got, want)
	}
	if s.Doc().Censored != 1 {
		t.Errorf("censored %d, want the v1 hold trial", s.Doc().Censored)
	}
}

// slowedObserver gives each trial a skipper upstream_last_present stage whose
// uncertainty grows to worst at the last trial.
func slowedObserver(trials []*Record, worst time.Duration) []*Record {
	for i, r := range trials {
		u := st(StageUpstreamLastSeen, "skipper/skipper-0", 500*time.Millisecond)
		u.UncertaintyNS = int64(worst) * int64(i+1) / int64(len(trials))
		r.Stages = append(r.Stages, u)
	}
	return trials
}

// A --target run under the app's own traffic (--rate 0) sent no load: its
// report never says the clients had no failures.
func TestTargetWithoutLoadSaysFailuresUnknown(t *testing.T) {
	h := &Header{Target: &Target{Kind: "Deployment", Namespace: "team", Name: "web", Witness: "sidecar"}}
	s := NewSummary(h, Options{})
	for _, r := range sidecarTrials([]*Record{trial(1, -1, time.Second), trial(2, -1, 2*time.Second)}) {
		s.Add(r)
	}
	s.Close()
	var buf bytes.Buffer
	if err := NewTextReporter(s)(&buf); err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(buf.String()), " ")
	if !strings.Contains(flat, "client failures: not known") || strings.Contains(flat, "all trials none") {
		t.Errorf("report of a --rate 0 run:\n%s\nwant the client failures said unknown, never none", buf.String())
	}
}
