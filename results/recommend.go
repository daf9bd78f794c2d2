package results

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Recommendation is DESIGN.md's "Recommendation" with its numbers:
//
//	preStop ≥ U(q, confidence) of (traffic end − prestop_called) + margin, rounded up to whole seconds
//	terminationGracePeriodSeconds ≥ preStop + drain + headroom
//	deregistration_delay < preStop < grace, where an LB deregistration delay applies
//
// U is the order-statistic upper confidence bound of Bound. traffic end and
// prestop_called are both read on the probe's clock, so the skew correction
// cancels out of their difference.
type Recommendation struct {
	// Basis is the stage the covered duration starts at: prestop_called,
	// or sigterm when no trial recorded a preStop call.
	Basis string `json:"basis"`
	// FallbackTrials used sigterm because they lacked prestop_called.
	FallbackTrials int `json:"fallback_trials,omitempty"`
	// N is the number of trials behind CoverNS, Censored of them cut at the
	// hold.
	N        int `json:"n"`
	Censored int `json:"censored,omitempty"`
	// Bound is the upper confidence bound of (traffic end − Basis); CoverNS
	// is its value. When Bound.LowerBound, the bound fell on a censored
	// trial and CoverNS (and so every setting) is only a floor.
	Bound   Bound `json:"bound"`
	CoverNS int64 `json:"cover_ns"`
	// MarginNS is added to CoverNS; MarginFrom says where it came from.
	MarginNS   int64  `json:"margin_ns"`
	MarginFrom string `json:"margin_from"`
	// PreStopSeconds is the preStop sleep to configure.
	PreStopSeconds int64 `json:"prestop_seconds"`
	DrainNS        int64 `json:"drain_ns"`
	HeadroomNS     int64 `json:"headroom_ns"`
	// DeregistrationDelayNS is the LB deregistration delay the preStop had
	// to exceed, when one was given.
	DeregistrationDelayNS int64 `json:"deregistration_delay_ns,omitempty"`
	// GraceSeconds is the terminationGracePeriodSeconds to configure.
	GraceSeconds int64 `json:"termination_grace_period_seconds"`
	// DNS is what DNS clients of a headless Service need (measure --dns),
	// when the run timed dns_removed and saw a TTL; PreStopSeconds covers
	// it too (additive within schema 2).
	DNS *DNSCover `json:"dns,omitempty"`
}

// DNSCover is the preStop a headless Service's DNS clients need: the
// cluster DNS stops answering the address at dns_removed, and a client
// that resolved just before may use its answer for one TTL more, so the
// last new connection to the pod comes by dns_removed + TTL — for clients
// that honour the TTL and connect anew after re-resolving. A client that
// re-resolves only when a connection drops (grpc-go's dns resolver) is
// ended by its connections, not by DNS: docs/dns.md.
type DNSCover struct {
	// N trials timed both dns_removed and the basis, Censored of them
	// only as a floor (dns_listed: a server still answered when the trial
	// ended; their last answer counts, as at least); Bound is the upper
	// confidence bound of (dns_removed − basis), CoverNS its value (a
	// floor when Bound.LowerBound).
	N        int   `json:"n"`
	Censored int   `json:"censored,omitempty"`
	Bound    Bound `json:"bound"`
	CoverNS  int64 `json:"cover_ns"`
	// TTLNS is the longest TTL the DNS answers carried (the header's).
	TTLNS int64 `json:"ttl_ns"`
	// PreStopSeconds is ⌈U + TTL + margin⌉; Raised tells that it raised
	// the recommendation's preStop.
	PreStopSeconds int64 `json:"prestop_seconds"`
	Raised         bool  `json:"raised,omitempty"`
}

// LowerBound reports whether the recommendation is only a floor: its
// window bound fell on a trial cut at the hold, or its DNS bound on one
// whose DNS still answered at its end (the preStop is the larger of the
// two needs, so either floor makes it one), so a longer hold is needed to
// know it.
func (r *Recommendation) LowerBound() bool {
	return r != nil && (r.Bound.LowerBound || r.DNS.lowerBound())
}

func (d *DNSCover) lowerBound() bool { return d != nil && d.Bound.LowerBound }

// FloorCause says why the recommendation is only a floor ("" when it is
// not): which bound fell on which trials.
func (r *Recommendation) FloorCause() string {
	var why []string
	if r.LowerBound() && r.Bound.LowerBound {
		why = append(why, fmt.Sprintf("the window's bound fell on a trial cut at the hold (%d of %d trials)", r.Censored, r.N))
	}
	if r.DNS.lowerBound() {
		why = append(why, fmt.Sprintf("the DNS bound fell on a trial a DNS server still answered at its end (%d of %d trials)", r.DNS.Censored, r.DNS.N))
	}
	return strings.Join(why, "; ")
}

// LongerHold is the hold to rerun with when a run's recommendation is only
// a floor: three times the last one (hold), in whole minutes from a minute
// on, else whole seconds.
func LongerHold(hold time.Duration) time.Duration {
	next := 3 * hold
	if next >= time.Minute {
		return next.Round(time.Minute)
	}
	return max(next.Round(time.Second), time.Second)
}

// rerunHold is "--hold 3m0s" from the run's header, or "a longer --hold".
func rerunHold(h *Header) string {
	if h == nil || h.HoldNS <= 0 {
		return "a longer --hold"
	}
	return "--hold " + LongerHold(time.Duration(h.HoldNS)).String()
}

// PreStop is the recommended preStop sleep.
func (r *Recommendation) PreStop() time.Duration {
	return time.Duration(r.PreStopSeconds) * time.Second
}

// Grace is the recommended terminationGracePeriodSeconds as a duration.
func (r *Recommendation) Grace() time.Duration {
	return time.Duration(r.GraceSeconds) * time.Second
}

// ceilSeconds rounds d up to whole seconds, never below 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

func (s *Summary) options() Options {
	o := s.opts
	if (o.Quantile <= 0 || o.Quantile >= 1) && s.Header != nil {
		o.Quantile = s.Header.Quantile
	}
	if o.Quantile <= 0 || o.Quantile >= 1 {
		o.Quantile = DefaultQuantile
	}
	if (o.Confidence <= 0 || o.Confidence >= 1) && s.Header != nil {
		o.Confidence = s.Header.Confidence
	}
	if o.Confidence <= 0 || o.Confidence >= 1 {
		o.Confidence = DefaultConfidence
	}
	if o.Margin <= 0 {
		o.Margin = DefaultMargin
	}
	if o.Headroom <= 0 {
		o.Headroom = DefaultHeadroom
	}
	if o.Drain <= 0 && s.Header != nil {
		o.Drain = time.Duration(s.Header.DrainNS)
	}
	if o.DeregistrationDelay <= 0 && s.Header != nil {
		o.DeregistrationDelay = time.Duration(s.Header.DeregistrationDelayNS)
	}
	return o
}

func (s *Summary) recommend() *Recommendation {
	x := s.samples[metricCover]
	if x.n() == 0 {
		return nil
	}
	o := s.options()
	b, _ := newBound(x, o.Quantile, o.Confidence)
	r := &Recommendation{
		Basis:          StagePrestopCalled,
		FallbackTrials: s.fallback,
		N:              x.n(),
		Censored:       x.nCens,
		Bound:          b,
		CoverNS:        b.NS,
		DrainNS:        int64(o.Drain),
		HeadroomNS:     int64(o.Headroom),
	}
	switch x.n() {
	case s.fallback:
		r.Basis = StageSigterm
	case s.fromDeletion:
		r.Basis = StageDeleteSent
	}
	r.MarginNS, r.MarginFrom = int64(o.Margin), "the least margin"
	if res, name := s.worstResolution(); res > o.Margin {
		r.MarginNS = int64(res)
		r.MarginFrom = "worst observer resolution"
		if name != "" {
			r.MarginFrom = fmt.Sprintf("observer %s resolution", name)
		}
	}
	r.PreStopSeconds = ceilSeconds(max(time.Duration(r.CoverNS), 0) + time.Duration(r.MarginNS))
	if y := s.samples[metricDNSCover]; y.n() > 0 {
		if ttl, ok := s.Header.DNSTTL(); ok {
			db, _ := newBound(y, o.Quantile, o.Confidence)
			dc := &DNSCover{N: y.n(), Censored: y.nCens, Bound: db, CoverNS: db.NS, TTLNS: int64(ttl)}
			dc.PreStopSeconds = ceilSeconds(max(time.Duration(db.NS), 0) + ttl + time.Duration(r.MarginNS))
			if dc.PreStopSeconds > r.PreStopSeconds {
				r.PreStopSeconds, dc.Raised = dc.PreStopSeconds, true
			}
			r.DNS = dc
		}
	}
	if dd := o.DeregistrationDelay; dd > 0 {
		r.DeregistrationDelayNS = int64(dd)
		if r.PreStop() <= dd {
			// deregistration_delay < preStop: the LB keeps sending until
			// its delay ends.
			r.PreStopSeconds = int64(dd/time.Second) + 1
		}
	}
	r.GraceSeconds = r.PreStopSeconds + ceilSeconds(o.Drain+o.Headroom)
	return r
}

// Formula renders the recommendation as the formulas with their numbers,
// one line each.
func (r *Recommendation) Formula() []string {
	basis := "prestop_called"
	switch r.Basis {
	case StageSigterm:
		basis = "sigterm"
	case StageDeleteSent:
		basis = "delete_sent"
	}
	ge := ""
	if r.LowerBound() {
		ge = "≥ "
	}
	need := max(time.Duration(r.CoverNS), 0) + time.Duration(r.MarginNS)
	lines := []string{
		fmt.Sprintf("preStop ≥ U(traffic end − %s) + margin = %s%s + %s = %s%s → %s%ds",
			basis, ge, fmtDur(r.CoverNS), fmtDur(r.MarginNS), ge, fmtDur(int64(need)), ge, ceilSeconds(need)),
		"U: " + r.Bound.Claim(),
	}
	if d := r.DNS; d != nil {
		dneed := max(time.Duration(d.CoverNS), 0) + time.Duration(d.TTLNS) + time.Duration(r.MarginNS)
		dge := ""
		if d.lowerBound() {
			dge = "≥ "
		}
		l := fmt.Sprintf("DNS clients that honour the TTL: preStop ≥ U(dns_removed − %s) + TTL + margin = %s%s + %s + %s = %s%s → %s%ds",
			basis, dge, fmtDur(d.CoverNS), fmtDur(d.TTLNS), fmtDur(r.MarginNS), dge, fmtDur(int64(dneed)), dge, d.PreStopSeconds)
		if d.Raised {
			l += fmt.Sprintf(" (raises the preStop from %s%ds)", ge, ceilSeconds(need))
		}
		lines = append(lines, l, "U(dns_removed): "+d.Bound.Claim())
	}
	if r.DeregistrationDelayNS > 0 {
		l := fmt.Sprintf("deregistration_delay < preStop: %s < preStop → %s%ds", fmtDur(r.DeregistrationDelayNS), ge, r.PreStopSeconds)
		if ceilSeconds(need) < r.PreStopSeconds {
			l += fmt.Sprintf(" (raised from %ds)", ceilSeconds(need))
		}
		lines = append(lines, l)
	}
	lines = append(lines, fmt.Sprintf("terminationGracePeriodSeconds ≥ preStop + drain + headroom = %s%ds + %s + %s → %s%ds",
		ge, r.PreStopSeconds, fmtDur(r.DrainNS), fmtDur(r.HeadroomNS), ge, r.GraceSeconds))
	return lines
}

// Caveats are what a reader of the recommendation must know, one sentence
// each.
func (s *Summary) Caveats() []string {
	s.mustClosed()
	d := &s.doc
	var out []string
	if d.Interrupted {
		out = append(out, fmt.Sprintf("The run was interrupted: this report covers the %d trials that finished.", d.Trials))
	}
	if r := d.Recommendation; r != nil {
		b := r.Bound
		if r.LowerBound() {
			out = append(out, fmt.Sprintf("The bound fell on a trial cut short at the hold (%d of %d trials were): its traffic went on until the probe was released, so U and every setting above are only floors. Rerun with a longer hold.",
				r.Censored, r.N))
		}
		if !b.Enough() {
			out = append(out, fmt.Sprintf("With %s the bound is the largest trial, which covers only %s of deletions with %s confidence: %s of deletions needs %d trials (99%% needs %d).",
				plural(b.N, "trial", "trials"), pct(b.Covers), pct(b.Confidence), pct(b.Quantile), b.Need, TrialsNeeded(0.99, b.Confidence)))
		}
		switch {
		case r.Basis == StageDeleteSent:
			out = append(out, "The sidecar sees neither the app's preStop call nor its SIGTERM: the covered duration runs from the deletion (delete_sent), which the kubelet's preStop follows, so the preStop it asks for is on the safe side.")
		case r.Basis == StageSigterm:
			out = append(out, "No trial recorded a preStop call (no preStop hook configured?): the covered duration runs from SIGTERM instead of prestop_called.")
		case r.FallbackTrials > 0:
			out = append(out, fmt.Sprintf("%d of %d trials recorded no preStop call; for them the covered duration runs from SIGTERM.", r.FallbackTrials, r.N))
		}
		out = append(out, fmt.Sprintf("U is distribution-free (order statistics, exact binomial): it holds whatever shape the windows have. The margin (%s, %s) covers what a bound of trials cannot: the stamps' resolution and changes of the cluster since the run.",
			fmtDur(r.MarginNS), r.MarginFrom))
		if d := r.DNS; d != nil && d.Censored > 0 {
			out = append(out, fmt.Sprintf("%s of the DNS line still had a DNS server answering the address when the trial ended (dns_listed): counted in its n as at least their last answer (≥).",
				plural(d.Censored, "trial", "trials")))
		}
		if r.DNS != nil {
			out = append(out, "The DNS line holds for clients that re-resolve when the TTL runs out and connect anew: one that re-resolves only when a connection drops (grpc-go's dns resolver) or keeps connections open stops reaching the pod when those connections close, which DNS does not bound (docs/dns.md).")
		}
	} else {
		out = append(out, "No trial with valid probe-clock stages recorded both the traffic end and a termination signal (prestop_called or sigterm; the deletion for the sidecar's): no recommendation.")
	}
	if n := sumCounts(d.GRPCFailures) + sumCounts(d.RunnerGRPCFailures); n > 0 {
		out = append(out, GRPCFailuresCause(n))
	}
	if n := d.InvalidReasons[ReasonHoldReached]; n > 0 {
		out = append(out, fmt.Sprintf("%s ran into the hold: censored, counted in n and in every quantile as at least what was seen (≥).",
			plural(n, "trial", "trials")))
	}
	if n := d.InvalidReasons[ReasonListenerClosed]; n > 0 {
		out = append(out, fmt.Sprintf("In %s the app stopped listening while its address was still routed to (listener_closed before the ingress or the slices let it go, or requests failed): connections were refused from then on, so the window is censored there, counted in n and in every quantile as at least what was seen (≥). That is the finding: the app needs a preStop that keeps it listening until it is no longer routed to.",
			plural(n, "trial", "trials")))
	}
	if parts := reasonParts(d, true); len(parts) > 0 {
		out = append(out, fmt.Sprintf("%s: %s. A reason leaves out only the stages it corrupts; the window and the recommendation take every trial whose probe-clock stages are valid.",
			plural(d.Trials-d.Valid, "trial carries reasons", "trials carry reasons"), strings.Join(parts, "; ")))
	}
	if _, ok := s.Dist(StageServerDeleteTime); ok {
		out = append(out, "server_delete_time is deletionTimestamp − grace at 1 s resolution: a cross-check of T0, not a measurement.")
	}
	return out
}

// reasonParts renders each reason code with its count, most frequent
// first, and with effects what it does to the trial's stages.
func reasonParts(d *SummaryDoc, effects bool) []string {
	var parts []string
	for _, code := range d.InvalidSorted() {
		p := fmt.Sprintf("%s ×%d", code, d.InvalidReasons[code])
		if e := reasonEffect(code); effects && e != "" {
			p += " (" + e + ")"
		}
		parts = append(parts, p)
	}
	return parts
}

// fmtDur renders nanoseconds as seconds with millisecond precision.
func fmtDur(ns int64) string {
	return fmt.Sprintf("%.3fs", float64(ns)/1e9)
}

// trimFloat renders 99 as "99" and 99.9 as "99.9".
func trimFloat(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".")
}

// worstResolution is the coarsest observer resolution of the run and the
// observer's name ("" if unknown): the header's, measured before the first
// trial, or a trial's upstream_last_present uncertainty, the resolution at
// that trial's end — coarser when the controller slowed down during the
// trials and the observer's polls were kept further apart (the tracker backs
// off after an overrun: measure/upstream/budget.go, nextPoll).
func (s *Summary) worstResolution() (time.Duration, string) {
	worst, name := s.Header.WorstResolution(), ""
	if s.Header != nil {
		for _, ob := range s.Header.Observers {
			if ob.Resolution() == worst {
				name = ob.Name
				break
			}
		}
	}
	for _, r := range s.records {
		for _, st := range r.Stages {
			if st.Name != StageUpstreamLastSeen || time.Duration(st.UncertaintyNS) <= worst {
				continue
			}
			worst, name = time.Duration(st.UncertaintyNS), ""
			if ob, _, ok := strings.Cut(st.Key, "/"); ok {
				name = ob
			}
		}
	}
	return worst, name
}

// GRPCFailuresCause explains n failed calls of a gRPC DNS client (grpc-go's
// dns resolver and round_robin): what made them, and what prevents them.
// grpc-go asks DNS again only when the balancer sees a connection lost
// (ccBalancerWrapper.ResolveNow, balancer_wrapper.go), and at most every
// MinResolutionInterval, 30 s (internal/resolver/dns/dns_resolver.go,
// watcher): a client whose every known address was deleted within that
// floor has no backend until its next answer, whatever the preStop.
func GRPCFailuresCause(n int) string {
	return fmt.Sprintf("A gRPC DNS client failed %s: grpc-go's dns resolver asks DNS again only when a connection is lost, and at most every 30 s (MinResolutionInterval), so once successive deletions had removed every address it knew, it had no backend until its next answer. The preStop does not prevent this: the rollout's pace does. Replace pods no faster than the client re-resolves (minReadySeconds of 30 s or more with maxUnavailable 0, so each new pod has been in DNS for a resolution before the next old one goes; a small maxSurge), or resolve through a proxy or xDS that follows EndpointSlices (docs/dns.md).",
		plural(n, "call", "calls"))
}

// sumCounts is the total of a count by kind.
func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
