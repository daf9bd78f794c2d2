package results

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The synthetic shift mirrors the local cluster's --ingress-poll change: the
// ingress's reprogramming (upstream_removed) and everything downstream of
// it moves, the EndpointSlice stages do not.
var (
	shiftedStages = []string{StageUpstreamRemoved, StageUpstreamLastSeen, PointWindow, StageLastRequest, StageLastAccept,
		StageClientLastRouted, "slice_not_ready→upstream_removed", "prestop_called→window"}
	steadyStages = []string{StageSliceNotReady, StageDeleteAcked, StagePodTerminatingSeen, StagePrestopCalled, StageSigterm,
		"prestop_called→sigterm", "upstream_removed→window", StageServerDeleteTime}
)

func TestCompareFlagsKnownShift(t *testing.T) {
	base := synthSummary(synthSpec{seed: 101, trials: 20, poll: time.Second})
	next := synthSummary(synthSpec{seed: 202, trials: 20, poll: time.Second, extra: 1500 * time.Millisecond})
	c := Compare(base, next, CompareOptions{})
	for _, m := range shiftedStages {
		if mc, ok := c.Metric(m); !ok || mc.Verdict != Worse {
			t.Errorf("%s: verdict %q, want worse (1.5 s shift)", m, mc.Verdict)
		}
	}
	for _, m := range steadyStages {
		if mc, ok := c.Metric(m); !ok || mc.Verdict == Worse || mc.Verdict == Better {
			t.Errorf("%s: verdict %q, want same / n/a (no shift)", m, mc.Verdict)
		}
	}
	// Reversed, the shift is an improvement.
	back := Compare(next, base, CompareOptions{})
	if mc, _ := back.Metric(PointWindow); mc.Verdict != Better {
		t.Errorf("reversed: window verdict %q, want better", mc.Verdict)
	}
}

// Runs that differ only by their seed: no metric may be called worse or
// better, across several pairs.
func TestCompareIgnoresNoise(t *testing.T) {
	flagged := 0
	for seed := uint64(1); seed <= 4; seed++ {
		spec := synthSpec{seed: seed, trials: 20, poll: 3 * time.Second}
		base := synthSummary(spec)
		spec.seed += 1000
		c := Compare(base, synthSummary(spec), CompareOptions{})
		for _, m := range c.Metrics {
			if m.Verdict == Worse || m.Verdict == Better {
				flagged++
				t.Logf("seed %d: %s %s %+v", seed, m.Metric, m.Verdict, m.Changes)
			}
		}
	}
	if flagged > 0 {
		t.Errorf("%d metrics flagged across 4 pairs of same-distribution runs", flagged)
	}
}

func TestCompareDeterministic(t *testing.T) {
	base := synthSummary(synthSpec{seed: 1, trials: 15, poll: time.Second})
	next := synthSummary(synthSpec{seed: 2, trials: 15, poll: time.Second})
	if a, b := Compare(base, next, CompareOptions{}), Compare(base, next, CompareOptions{}); !reflect.DeepEqual(a, b) {
		t.Error("the same two runs compared twice differ")
	}
}

func TestParseMaxP99(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]time.Duration
		wantErr string
	}{
		{in: []string{"window=3s", "upstream_removed=2500ms"}, want: map[string]time.Duration{PointWindow: 3 * time.Second, StageUpstreamRemoved: 2500 * time.Millisecond}},
		{in: []string{"slice_not_ready->upstream_removed=2s"}, want: map[string]time.Duration{"slice_not_ready→upstream_removed": 2 * time.Second}},
		{in: []string{"prestop_called..window=4s"}, want: map[string]time.Duration{"prestop_called→window": 4 * time.Second}},
		{in: []string{"window"}, wantErr: "want metric=duration"},
		{in: []string{"windw=3s"}, wantErr: `unknown metric "windw"`},
		{in: []string{"window=3"}, wantErr: "positive duration"},
		{in: []string{"window=-1s"}, wantErr: "positive duration"},
	}
	for _, tt := range tests {
		got, err := ParseMaxP99(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--max-p99") {
				t.Errorf("%v: err %v, want one naming --max-p99 and %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v: %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseRegression(t *testing.T) {
	for in, want := range map[string]float64{"20%": 0.2, "0.2": 0.2, " 150% ": 1.5, "": 0} {
		if got, err := ParseRegression(in); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "-5%", "0", "NaN", "%"} {
		if _, err := ParseRegression(in); err == nil || !strings.Contains(err.Error(), "--max-regression") {
			t.Errorf("%q: err %v, want one naming --max-regression", in, err)
		}
	}
}

func TestThresholdsCheck(t *testing.T) {
	base := synthSummary(synthSpec{seed: 101, trials: 20, poll: time.Second})
	next := synthSummary(synthSpec{seed: 202, trials: 20, poll: time.Second, extra: 1500 * time.Millisecond})
	noise := synthSummary(synthSpec{seed: 303, trials: 20, poll: time.Second})
	w, _ := next.Dist(PointWindow)
	p99 := time.Duration(w.P99NS)
	breaches := func(th Thresholds, s *Summary, c *Comparison) []string {
		var out []string
		for _, b := range th.Check(s, c) {
			out = append(out, b.Rule+":"+b.Metric)
		}
		return out
	}
	tests := []struct {
		name string
		th   Thresholds
		run  *Summary
		cmp  *Comparison
		want []string
	}{
		{"p99 under its cap", Thresholds{MaxP99: map[string]time.Duration{PointWindow: p99 + time.Millisecond}}, next, nil, nil},
		{"p99 at its cap passes", Thresholds{MaxP99: map[string]time.Duration{PointWindow: p99}}, next, nil, nil},
		{"p99 over its cap", Thresholds{MaxP99: map[string]time.Duration{PointWindow: p99 - time.Millisecond}}, next, nil, []string{"max-p99:window"}},
		{"a metric without samples breaches", Thresholds{MaxP99: map[string]time.Duration{StageContainerExit: time.Hour}}, NewClosed(), nil, []string{"max-p99:container_exit"}},
		{"regression over the limit", Thresholds{MaxRegression: 0.2}, next, Compare(base, next, CompareOptions{}), []string{
			"max-regression:upstream_last_present", "max-regression:upstream_removed", "max-regression:last_accept", "max-regression:last_request",
			"max-regression:client_last_routed", "max-regression:window", "max-regression:slice_removed", "max-regression:container_exit",
			"max-regression:pod_deleted", "max-regression:slice_not_ready→upstream_removed", "max-regression:slice_not_ready→window",
			"max-regression:prestop_called→window", "max-regression:sigterm→window"}},
		{"regression under a generous limit", Thresholds{MaxRegression: 10}, next, Compare(base, next, CompareOptions{}), nil},
		{"noise never breaches", Thresholds{MaxRegression: 0.01}, noise, Compare(base, noise, CompareOptions{}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := breaches(tt.th, tt.run, tt.cmp); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("breaches %v, want %v", got, tt.want)
			}
		})
	}
}

// NewClosed is an empty, closed summary.
func NewClosed() *Summary {
	s := NewSummary(nil, Options{})
	s.Close()
	return s
}
