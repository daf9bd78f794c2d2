package results

import (
	"strings"
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

// With --dns, the recommendation covers the headless Service's DNS
// clients: dns_removed − prestop_called, bounded like the window, plus the
// TTL a client may keep its last answer, plus the margin; it raises the
// preStop when that is longer, and says so.
func TestRecommendationCoversDNSClients(t *testing.T) {
	ms := time.Millisecond
	dnsHeader := func(ttl string) *Header {
		return &Header{Observers: []Observer{{Name: DNSObserver, ResolutionNS: int64(100 * ms), Settings: map[string]string{"ttl": ttl}}}}
	}
	recs := func() []*Record {
		var out []*Record
		for i := range 10 {
			// Window 1.0–1.9 s after the preStop call at 50 ms; DNS
			// dropped the address 60–150 ms after T0.
			r := trial(i+1, 50*ms, 50*ms+time.Second+time.Duration(i)*100*ms)
			r.Stages = append(r.Stages, st(StageDNSRemoved, "dns/a", 60*ms+time.Duration(i)*10*ms))
			out = append(out, r)
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		h              *Header
		prestop, grace int64
		raised         bool
		ttl            time.Duration
	}{
		// U(dns) = 150 − 50 = 100 ms; + 7 s + 1 s margin = 8.1 s → 9 s,
		// above the window's ⌈1.9 + 1⌉ = 3 s.
		{"ttl 7s raises it", dnsHeader("7s"), 9, 14, true, 7 * time.Second},
		// 0.1 + 1 + 1 = 2.1 → 3 s, not above 3 s.
		{"ttl 1s does not", dnsHeader("1s"), 3, 8, false, time.Second},
	} {
		s := NewSummary(tc.h, Options{})
		for _, r := range recs() {
			s.Add(r)
		}
		s.Close()
		r := s.Doc().Recommendation
		if r == nil || r.DNS == nil {
			t.Fatalf("%s: recommendation %+v, want one with DNS", tc.name, r)
		}
		if r.PreStopSeconds != tc.prestop || r.GraceSeconds != tc.grace || r.DNS.Raised != tc.raised {
			t.Errorf("%s: preStop %d grace %d raised %v, want %d %d %v", tc.name, r.PreStopSeconds, r.GraceSeconds, r.DNS.Raised, tc.prestop, tc.grace, tc.raised)
		}
		if r.DNS.CoverNS != int64(100*ms) || r.DNS.TTLNS != int64(tc.ttl) || r.DNS.N != 10 {
			t.Errorf("%s: DNS %+v", tc.name, r.DNS)
		}
		f := strings.Join(r.Formula(), "\n")
		if !strings.Contains(f, "DNS clients that honour the TTL") || strings.Contains(f, "raises the preStop") != tc.raised {
			t.Errorf("%s: formula:\n%s", tc.name, f)
		}
	}
	// Without a DNS observer in the header (or no TTL seen) there is no DNS
	// line: the TTL is not guessed.
	s := NewSummary(&Header{}, Options{})
	for _, r := range recs() {
		s.Add(r)
	}
	s.Close()
	if r := s.Doc().Recommendation; r == nil || r.DNS != nil || r.PreStopSeconds != 3 {
		t.Errorf("no DNS observer: %+v", r)
	}
}

// Trials where a DNS server still answered the address when the trial
// ended (dns_listed) are floors of the DNS line, never dropped: 8 trials
// DNS dropped within 150 ms and 2 it still answered at 59 s put the DNS
// bound at 59 s or more (a floor), the preStop at least 59 s + TTL +
// margin, and the recommendation says it is only a floor; with every
// trial dns_listed the DNS line is there, a floor, not gone.
func TestDNSListedTrialsAreFloors(t *testing.T) {
	ms := time.Millisecond
	h := &Header{Observers: []Observer{{Name: DNSObserver, ResolutionNS: int64(100 * ms), Settings: map[string]string{"ttl": "5s"}}}}
	run := func(listed int) *Recommendation {
		s := NewSummary(h, Options{})
		for i := range 10 {
			r := trial(i+1, 50*ms, 50*ms+time.Second+time.Duration(i)*100*ms)
			if i < listed {
				r.Stages = append(r.Stages, st(StageDNSLastPresent, "dns/a", 59*time.Second))
				r.Reasons = append(r.Reasons, Reason{Code: ReasonDNSListed, Detail: "dns/a still answered the address at its last poll"})
			} else {
				r.Stages = append(r.Stages, st(StageDNSLastPresent, "dns/a", 20*ms), st(StageDNSRemoved, "dns/a", 60*ms+time.Duration(i)*10*ms))
			}
			s.Add(r)
		}
		s.Close()
		return s.Doc().Recommendation
	}
	for _, listed := range []int{2, 10} {
		r := run(listed)
		if r == nil || r.DNS == nil {
			t.Fatalf("%d dns_listed: recommendation %+v, want a DNS line", listed, r)
		}
		d := r.DNS
		if d.N != 10 || d.Censored != listed || !d.Bound.LowerBound || d.CoverNS < int64(59*time.Second-50*ms) {
			t.Errorf("%d dns_listed: DNS %+v, want n = 10 with %d floors and a bound of at least 58.95s, itself a floor", listed, d, listed)
		}
		if min := int64(59 + 5 + 1); r.PreStopSeconds < min || !r.LowerBound() || r.Bound.LowerBound {
			t.Errorf("%d dns_listed: preStop %d (floor %v, window floor %v), want ≥ %d and a floor from the DNS bound alone", listed, r.PreStopSeconds, r.LowerBound(), r.Bound.LowerBound, min)
		}
		f := strings.Join(r.Formula(), "\n")
		if !strings.Contains(f, "U(dns_removed − prestop_called) + TTL + margin = ≥ ") || !strings.Contains(r.FloorCause(), "DNS") {
			t.Errorf("%d dns_listed: the formula or the floor's cause does not say the DNS bound is a floor:\n%s\n%s", listed, f, r.FloorCause())
		}
	}
}

// A gRPC DNS client's failed calls are counted and shown, a line per
// client, never "none" when it failed: the tool's client's and the
// runners' apart, in the text report, the Markdown and the JSON summary,
// with the cause and what prevents it among the caveats.
func TestGRPCClientFailuresAreReported(t *testing.T) {
	ms := time.Millisecond
	h := &Header{GRPCDNS: &GRPCDNS{Target: "dns://10.244.0.1:53/probe.ns.svc.cluster.local:8081", RunnerTarget: "dns:///probe.ns.svc.cluster.local:8081", Rate: 50}}
	s := NewSummary(h, Options{})
	for i := range 6 {
		r := trial(i+1, 50*ms, 50*ms+time.Second)
		r.GRPC = &GRPCTrial{End: GRPCEndGoaway}
		r.Runners = []Runner{{Pod: "runner-0", GRPC: &GRPCTrial{End: GRPCEndGoaway}}}
		if i >= 3 {
			r.GRPC.Failures = map[string]int{"unavailable": 40}
			r.Runners[0].GRPC.Failures = map[string]int{"unavailable": 7}
		}
		s.Add(r)
	}
	s.Close()
	d := s.Doc()
	if d.GRPCFailures["unavailable"] != 120 || d.RunnerGRPCFailures["unavailable"] != 21 {
		t.Fatalf("gRPC failures %v, runners' %v; want 120 and 21 unavailable", d.GRPCFailures, d.RunnerGRPCFailures)
	}
	var text, md, js strings.Builder
	for w, r := range map[*strings.Builder]Reporter{&text: NewTextReporter(s), &md: NewMarkdownReporter(s), &js: NewJSONReporter(s)} {
		if err := r(w); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"gRPC DNS client failures (this machine's): all trials unavailable 120", "gRPC DNS client failures (the runners'): all trials unavailable 21", "MinResolutionInterval", "minReadySeconds"} {
		if !strings.Contains(strings.Join(strings.Fields(text.String()), " "), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	if !strings.Contains(md.String(), "GRPC DNS client failures (this machine's): all trials unavailable 120") {
		t.Errorf("markdown lacks the client's failures:\n%s", md.String())
	}
	if !strings.Contains(js.String(), `"grpc_failures"`) || !strings.Contains(js.String(), `"runner_grpc_failures"`) {
		t.Errorf("JSON summary lacks the gRPC failures:\n%s", js.String())
	}
}
