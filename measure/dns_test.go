package measure

import (
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// dnsInput is completeInput with --dns: two DNS servers, each with its own
// informer, dropped the address 40 ms and 310 ms after the slice turned it
// not ready.
func dnsInput() trialInput {
	in := completeInput()
	in.dns = true
	in.dnsRemovals = []upstream.Removal{
		{Observer: upstream.KindDNS, Replica: "kube-system/coredns-a", Resolution: 100 * time.Millisecond,
			LastPresent: upstream.Reading{Sent: at(-45), At: at(-44)}, Removed: upstream.Reading{Sent: at(54), At: at(55)}},
		{Observer: upstream.KindDNS, Replica: "kube-system/coredns-b", Resolution: 100 * time.Millisecond,
			LastPresent: upstream.Reading{Sent: at(224), At: at(225)}, Removed: upstream.Reading{Sent: at(324), At: at(325)}},
	}
	return in
}

func TestBuildRecordDNS(t *testing.T) {
	rec := buildRecord(dnsInput())
	if !rec.Valid {
		t.Fatalf("invalid: %s", rec.InvalidReason())
	}
	if d, ok := rec.Offset(results.StageDNSRemoved); !ok || d != 325*time.Millisecond {
		t.Errorf("dns_removed = %s, %v; want the later server's 325ms", d, ok)
	}
	if d, ok := rec.Between(results.StageSliceNotReady, results.StageDNSRemoved); !ok || d != 310*time.Millisecond {
		t.Errorf("slice_not_ready→dns_removed = %s, %v", d, ok)
	}
	s, ok := rec.StageKey(results.StageDNSRemoved, "dns/kube-system/coredns-a")
	if !ok || s.UncertaintyNS != int64(100*time.Millisecond) || s.Clock != results.ClockTool {
		t.Errorf("coredns-a's dns_removed %+v (%v): want its 100ms bracket on the tool clock", s, ok)
	}
	if _, ok := rec.StageKey(results.StageDNSLastPresent, "dns/kube-system/coredns-b"); !ok {
		t.Error("no dns_last_present for coredns-b")
	}

	for _, tc := range []struct {
		name   string
		mutate func(*trialInput)
		code   string
		want   string
	}{
		{"blind", func(in *trialInput) {
			in.dnsRemovals[1].Removed, in.dnsRemovals[1].Blind = upstream.Reading{}, 2
		}, results.ReasonDNSBlind, "DNS server dns/kube-system/coredns-b went unreadable"},
		{"still answered", func(in *trialInput) { in.dnsRemovals[0].Removed = upstream.Reading{} }, results.ReasonDNSListed, "still listed"},
		{"never answered", func(in *trialInput) { in.dnsRemovals = nil }, results.ReasonDNSBlind, "no DNS server ever answered"},
	} {
		in := dnsInput()
		tc.mutate(&in)
		rec := buildRecord(in)
		if len(rec.Reasons) != 1 || rec.Reasons[0].Code != tc.code || !strings.Contains(rec.Reasons[0].Detail, tc.want) {
			t.Errorf("%s: reasons %+v, want one %s saying %q", tc.name, rec.Reasons, tc.code, tc.want)
			continue
		}
		if rec.PointValid(results.StageDNSRemoved) || !rec.PointValid(results.PointWindow) || !rec.PointValid(results.StageUpstreamRemoved) {
			t.Errorf("%s: a DNS fault must drop the DNS stages only", tc.name)
		}
	}
	// Without --dns, no DNS stage and no DNS fault.
	in := dnsInput()
	in.dns, in.dnsRemovals = false, nil
	if rec := buildRecord(in); !rec.Valid {
		t.Errorf("without --dns: %s", rec.InvalidReason())
	}
}
