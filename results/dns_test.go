package results

import (
	"testing"
	"time"
)

// A DNS server that could not be read invalidates the DNS stages of the
// trial and nothing else: the window, the slice and the ingress stay.
func TestDNSReasonsInvalidateOnlyDNSStages(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	st := func(name, key string, d time.Duration) Stage {
		return Stage{Name: name, Key: key, At: t0.Add(d), OffsetNS: int64(d), Clock: ClockTool}
	}
	for _, code := range []string{ReasonDNSBlind, ReasonDNSListed} {
		rec := &Record{Kind: KindTrial, T0: t0, Reasons: []Reason{{Code: code, Detail: "x"}}, Stages: []Stage{
			st(StageSliceNotReady, "", 40*time.Millisecond),
			st(StageDNSLastPresent, "dns/a", 30*time.Millisecond),
			st(StageDNSRemoved, "dns/a", 300*time.Millisecond),
			st(StageDNSRemoved, "dns/b", 900*time.Millisecond),
			st(StageUpstreamRemoved, "skipper/x", 2*time.Second),
			st(StageLastRequest, "", 3*time.Second),
		}}
		if rec.PointValid(StageDNSRemoved) || rec.PointValid(StageDNSLastPresent) {
			t.Errorf("%s: DNS stages still valid", code)
		}
		for _, p := range []string{StageSliceNotReady, StageUpstreamRemoved, PointWindow} {
			if !rec.PointValid(p) {
				t.Errorf("%s: %s invalidated", code, p)
			}
		}
		rec.Reasons = nil
		// Keyed: the answer of the last server to drop the address ends
		// the stage.
		if d, ok := rec.Offset(StageDNSRemoved); !ok || d != 900*time.Millisecond {
			t.Errorf("dns_removed = %v, %v; want the latest replica's 900ms", d, ok)
		}
		if d, ok := rec.Between(StageSliceNotReady, StageDNSRemoved); !ok || d != 860*time.Millisecond {
			t.Errorf("slice_not_ready→dns_removed = %v, %v", d, ok)
		}
	}
}
