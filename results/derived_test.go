package results

import (
	"testing"
	"time"
)

func rec(stages ...Stage) *Record {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Record{Kind: KindTrial, Valid: true, T0: t0}
	for _, s := range stages {
		if s.At.IsZero() {
			s.At = t0.Add(time.Duration(s.OffsetNS))
		}
		r.Stages = append(r.Stages, s)
	}
	return r
}

func st(name, key string, off time.Duration) Stage {
	return Stage{Name: name, Key: key, OffsetNS: int64(off)}
}

func TestRecordDerived(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		r    *Record
		// want: metric → offset; absent metrics must be missing, and
		// delete_sent (T0) is always 0
		want map[string]time.Duration
	}{
		{
			name: "window is the later of last_accept over peers and last_request",
			r: rec(st(StageLastAccept, "10.0.0.1", 900*ms), st(StageLastAccept, "10.0.0.2", 1200*ms),
				st(StageLastRequest, "", 1100*ms), st(StagePrestopCalled, "", 50*ms), st(StageSigterm, "", 60*ms)),
			want: map[string]time.Duration{PointWindow: 1200 * ms, StageLastAccept: 1200 * ms, StageLastRequest: 1100 * ms,
				StagePrestopCalled: 50 * ms, StageSigterm: 60 * ms, "after_prestop": 1150 * ms, "after_sigterm": 1140 * ms, "after_termination": 1150 * ms},
		},
		{
			name: "keep-alive: last_request after the last accept ends the window",
			r:    rec(st(StageLastAccept, "10.0.0.1", 300*ms), st(StageLastRequest, "", 2500*ms), st(StageSigterm, "", 40*ms)),
			want: map[string]time.Duration{PointWindow: 2500 * ms, StageLastAccept: 300 * ms, StageLastRequest: 2500 * ms, StageSigterm: 40 * ms,
				"after_sigterm": 2460 * ms, "after_termination": 2460 * ms},
		},
		{
			name: "upstream_removed is the last observer replica",
			r: rec(st(StageUpstreamRemoved, "skipper/a", 2*time.Second), st(StageUpstreamRemoved, "skipper/b", 3100*ms),
				st(StageUpstreamRemoved, "nginx/c", 700*ms), st(StageSliceNotReady, "", 20*ms)),
			want: map[string]time.Duration{StageUpstreamRemoved: 3100 * ms, StageSliceNotReady: 20 * ms, "slice→upstream": 3080 * ms},
		},
		{
			name: "first instance of an unkeyed stage",
			r:    rec(st(StageSliceNotReady, "", 20*ms), st(StageSliceNotReady, "", 1020*ms)),
			want: map[string]time.Duration{StageSliceNotReady: 20 * ms, StageDeleteSent: 0},
		},
		{
			name: "no traffic, no window",
			r:    rec(st(StagePrestopCalled, "", 50*ms)),
			want: map[string]time.Duration{StagePrestopCalled: 50 * ms},
		},
	}
	get := map[string]func(*Record) (time.Duration, bool){
		"after_prestop": (*Record).AfterPrestop,
		"after_sigterm": (*Record).AfterSigterm,
		"after_termination": func(r *Record) (time.Duration, bool) {
			d, _, ok := r.AfterTermination()
			return d, ok
		},
		"slice→upstream": func(r *Record) (time.Duration, bool) { return r.Between(StageSliceNotReady, StageUpstreamRemoved) },
	}
	for _, p := range Points {
		get[p] = func(r *Record) (time.Duration, bool) { return r.Offset(p) }
	}
	get[StageDeleteSent] = func(r *Record) (time.Duration, bool) { return r.Offset(StageDeleteSent) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for metric, f := range get {
				got, ok := f(tt.r)
				want, wantOK := tt.want[metric]
				if metric == StageDeleteSent {
					want, wantOK = 0, true
				}
				if ok != wantOK || got != want {
					t.Errorf("%s = %v, %v; want %v, %v", metric, got, ok, want, wantOK)
				}
			}
		})
	}
}

func TestUpstreamRemovedAndFallback(t *testing.T) {
	r := rec(st(StageUpstreamRemoved, "skipper/a", time.Second), st(StageUpstreamRemoved, "skipper/b", 2*time.Second),
		st(StageLastRequest, "", 1500*time.Millisecond), st(StageSigterm, "", 100*time.Millisecond))
	if d, ok := r.Offset(StageUpstreamRemoved); !ok || d != 2*time.Second {
		t.Errorf("Offset(upstream_removed) = %v, %v; want 2s (the later replica)", d, ok)
	}
	if s, ok := r.StageKey(StageUpstreamRemoved, "skipper/a"); !ok || s.Offset() != time.Second {
		t.Errorf("StageKey(skipper/a) = %v, %v", s, ok)
	}
	if n := len(r.Instances(StageUpstreamRemoved)); n != 2 {
		t.Errorf("Instances = %d, want 2", n)
	}
	if d, from, ok := r.AfterTermination(); !ok || from != StageSigterm || d != 1400*time.Millisecond {
		t.Errorf("AfterTermination = %v, %q, %v; want 1.4s from sigterm", d, from, ok)
	}
}

// A writer that stored At but left OffsetNS zero still gets offsets.
func TestOffsetFromAt(t *testing.T) {
	r := rec()
	r.Stages = []Stage{{Name: StageSliceNotReady, At: r.T0.Add(42 * time.Millisecond)}}
	if d, ok := r.Offset(StageSliceNotReady); !ok || d != 42*time.Millisecond {
		t.Errorf("Offset = %v, %v; want 42ms", d, ok)
	}
}

func TestInvalidReason(t *testing.T) {
	for _, tt := range []struct {
		r    Record
		want string
	}{
		{Record{Valid: true, Invalid: "ignored"}, ""},
		{Record{Valid: false}, "unspecified"},
		{Record{Valid: false, Invalid: "watch broke"}, "watch_broken: watch broke"},
		{Record{Valid: false, Reasons: []Reason{{Code: ReasonSkewBound, Detail: "±60ms over 50ms"}, {Code: ReasonHoldReached}}}, "skew_bound: ±60ms over 50ms; hold_reached"},
	} {
		if got := tt.r.InvalidReason(); got != tt.want {
			t.Errorf("%+v: InvalidReason = %q, want %q", tt.r, got, tt.want)
		}
	}
}

// verify --window-from: the longest valid window, a trial cut at the hold
// counted at its seen value (and said to be a floor), a trial whose probe
// record was lost (its window invalid) left out.
func TestLongestWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	trial := func(w time.Duration, reasons ...Reason) Record {
		return Record{Kind: KindTrial, Valid: len(reasons) == 0, Reasons: reasons, T0: t0,
			Stages: []Stage{{Name: StageLastRequest, At: t0.Add(w), OffsetNS: int64(w), Clock: ClockPod}}}
	}
	measured := trial(3 * time.Second)
	cut := trial(5*time.Second, Reason{Code: ReasonHoldReached})
	lost := trial(9*time.Second, Reason{Code: ReasonProbeUnreadable})
	if w, censored, ok := LongestWindow([]Record{measured, cut, lost}); !ok || w != 5*time.Second || !censored {
		t.Errorf("LongestWindow = %v, censored %t, ok %t; want 5s from the trial cut at the hold", w, censored, ok)
	}
	if w, censored, ok := LongestWindow([]Record{measured, lost}); !ok || w != 3*time.Second || censored {
		t.Errorf("without the cut trial: %v, %t, %t; want 3s, measured", w, censored, ok)
	}
	if _, _, ok := LongestWindow([]Record{lost}); ok {
		t.Error("only an invalid window: ok, want none")
	}
}
