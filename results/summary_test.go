package results

import (
	"bytes"
	"reflect"
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

func TestSummaryLeavesInvalidOut(t *testing.T) {
	s := NewSummary(nil, Options{})
	for i, end := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		s.Add(trial(i+1, 0, end))
	}
	bad := trial(4, 0, 100*time.Second)
	bad.Valid, bad.Invalid = false, "watch broke"
	s.Add(bad)
	bad2 := trial(5, 0, 200*time.Second)
	bad2.Valid = false
	s.Add(bad2)
	s.Close()
	d := s.Doc()
	if d.Trials != 5 || d.Valid != 3 || d.InvalidReasons["watch broke"] != 1 || d.InvalidReasons["unspecified"] != 1 {
		t.Errorf("counts: %+v", d)
	}
	w, ok := s.Dist(PointWindow)
	if !ok || w.N != 3 || w.MaxNS != int64(3*time.Second) || w.P50NS != int64(2*time.Second) {
		t.Errorf("window dist %+v: invalid trials leaked in", w)
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
	// Ten trials: traffic end − prestop_called = 1.0s … 1.9s; the p99 of 10
	// is the max, 1.9 s.
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
			cover: 1900 * ms, margin: time.Second, prestop: 3, grace: 8, caveat: "largest value seen",
		},
		{
			name: "observer resolution raises the margin; drain from the header",
			h:    header, trials: ten(50 * ms), basis: StagePrestopCalled,
			cover: 1900 * ms, margin: 3 * time.Second, prestop: 5, grace: 20, caveat: "observer skipper resolution",
		},
		{
			name: "flags beat the header's drain",
			h:    header, opts: Options{Drain: 30 * time.Second, Headroom: 500 * ms, Margin: 4 * time.Second}, trials: ten(50 * ms),
			basis: StagePrestopCalled, cover: 1900 * ms, margin: 4 * time.Second, prestop: 6, grace: 37, caveat: "--margin",
		},
		{
			name:   "no preStop hook: from SIGTERM, and said so",
			trials: ten(-1), basis: StageSigterm,
			cover: 1895 * ms, margin: time.Second, prestop: 3, grace: 8, fallback: 10, caveat: "runs from SIGTERM instead",
		},
		{
			name: "deregistration delay: preStop must exceed it",
			opts: Options{DeregistrationDelay: 15 * time.Second}, trials: ten(50 * ms), basis: StagePrestopCalled,
			cover: 1900 * ms, margin: time.Second, prestop: 16, grace: 21, caveat: "largest value seen",
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
			if !r.CoverIsMax || r.CILoNS > r.CoverNS || r.CIHiNS < r.CoverNS {
				t.Errorf("p99 of 10 must be the max inside its interval: %+v", r)
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

func TestInvalidReasonsSplit(t *testing.T) {
	s := NewSummary(nil, Options{})
	for i, reason := range []string{"no clock-skew estimate; the probe never received SIGTERM", "no clock-skew estimate", ""} {
		r := trial(i+1, 0, time.Second)
		r.Valid, r.Invalid = false, reason
		s.Add(r)
	}
	s.Close()
	want := map[string]int{"no clock-skew estimate": 2, "the probe never received SIGTERM": 1, "unspecified": 1}
	if got := s.Doc().InvalidReasons; !reflect.DeepEqual(got, want) {
		t.Errorf("InvalidReasons = %v, want %v", got, want)
	}
}
