package results

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Recommendation is DESIGN.md's "Recommendation" with its numbers:
//
//	preStop ≥ p99(traffic end − prestop_called) + margin, rounded up to whole seconds
//	terminationGracePeriodSeconds ≥ preStop + drain + headroom
//	deregistration_delay < preStop < grace, where an LB deregistration delay applies
//
// traffic end and prestop_called are both read on the probe's clock, so the
// skew correction cancels out of their difference.
type Recommendation struct {
	// Basis is the stage the covered duration starts at: prestop_called,
	// or sigterm when no trial recorded a preStop call.
	Basis string `json:"basis"`
	// FallbackTrials used sigterm because they lacked prestop_called.
	FallbackTrials int `json:"fallback_trials,omitempty"`
	// N is the number of trials behind CoverNS.
	N        int     `json:"n"`
	Quantile float64 `json:"quantile"`
	// CoverNS is the Quantile of (traffic end − Basis) over N trials.
	CoverNS int64 `json:"cover_ns"`
	// CoverIsMax is set when the empirical quantile is the sample maximum.
	CoverIsMax bool `json:"cover_is_max,omitempty"`
	// CILoNS and CIHiNS bound CoverNS at CILevel (seeded percentile
	// bootstrap, BootstrapResamples resamples).
	CILoNS  int64   `json:"ci_lo_ns"`
	CIHiNS  int64   `json:"ci_hi_ns"`
	CILevel float64 `json:"ci_level"`
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

// isMax reports whether the empirical p-quantile of n samples is the max:
// the estimator picks sample ⌈p·n⌉ (1-based).
func isMax(p float64, n int) bool {
	return n > 0 && int(math.Ceil(p*float64(n))) >= n
}

func (s *Summary) options() Options {
	o := s.opts
	if o.Quantile <= 0 || o.Quantile > 1 {
		o.Quantile = DefaultQuantile
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
	if len(x) == 0 {
		return nil
	}
	o := s.options()
	r := &Recommendation{
		Basis:          StagePrestopCalled,
		FallbackTrials: s.fallback,
		N:              len(x),
		Quantile:       o.Quantile,
		CoverIsMax:     isMax(o.Quantile, len(x)),
		CILevel:        ConfidenceLevel,
		DrainNS:        int64(o.Drain),
		HeadroomNS:     int64(o.Headroom),
	}
	if s.fallback == len(x) {
		r.Basis = StageSigterm
	}
	q, _ := Quantile(o.Quantile, sortedCopy(x))
	r.CoverNS = int64(q)
	if ci, ok := BootstrapQuantile(x, o.Quantile, BootstrapResamples, ConfidenceLevel, rngFor("recommendation")); ok {
		r.CILoNS, r.CIHiNS = int64(ci.Lo), int64(ci.Hi)
	}
	r.MarginNS, r.MarginFrom = int64(o.Margin), "--margin"
	if res := s.Header.WorstResolution(); res > o.Margin {
		r.MarginNS = int64(res)
		r.MarginFrom = "worst observer resolution"
		for _, ob := range s.Header.Observers {
			if ob.Resolution() == res {
				r.MarginFrom = fmt.Sprintf("observer %s resolution", ob.Name)
				break
			}
		}
	}
	r.PreStopSeconds = ceilSeconds(max(time.Duration(r.CoverNS), 0) + time.Duration(r.MarginNS))
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
	if r.Basis == StageSigterm {
		basis = "sigterm"
	}
	q := fmt.Sprintf("p%s", trimFloat(r.Quantile*100))
	need := max(time.Duration(r.CoverNS), 0) + time.Duration(r.MarginNS)
	lines := []string{
		fmt.Sprintf("preStop ≥ %s(traffic end − %s) + margin = %s + %s = %s → %ds",
			q, basis, fmtDur(r.CoverNS), fmtDur(r.MarginNS), fmtDur(int64(need)), ceilSeconds(need)),
	}
	if r.DeregistrationDelayNS > 0 {
		l := fmt.Sprintf("deregistration_delay < preStop: %s < preStop → %ds", fmtDur(r.DeregistrationDelayNS), r.PreStopSeconds)
		if ceilSeconds(need) < r.PreStopSeconds {
			l += fmt.Sprintf(" (raised from %ds)", ceilSeconds(need))
		}
		lines = append(lines, l)
	}
	lines = append(lines, fmt.Sprintf("terminationGracePeriodSeconds ≥ preStop + drain + headroom = %ds + %s + %s → %ds",
		r.PreStopSeconds, fmtDur(r.DrainNS), fmtDur(r.HeadroomNS), r.GraceSeconds))
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
		q := "p" + trimFloat(r.Quantile*100)
		if r.CoverIsMax {
			n := int(math.Round(1 / (1 - r.Quantile)))
			out = append(out, fmt.Sprintf("With %d trials the %s is the largest value seen (the empirical %s of fewer than %d trials is the maximum). Its %s%% bootstrap interval %s … %s cannot reach above the largest trial, so the true %s may be higher: measure %d or more trials for a %s that is not a maximum, and keep the margin.",
				r.N, q, q, n, trimFloat(r.CILevel*100), fmtDur(r.CILoNS), fmtDur(r.CIHiNS), q, n, q))
		}
		switch {
		case r.Basis == StageSigterm:
			out = append(out, "No trial recorded a preStop call (no preStop hook configured?): the covered duration runs from SIGTERM instead of prestop_called.")
		case r.FallbackTrials > 0:
			out = append(out, fmt.Sprintf("%d of %d trials recorded no preStop call; for them the covered duration runs from SIGTERM.", r.FallbackTrials, r.N))
		}
		out = append(out, fmt.Sprintf("The margin (%s, %s) absorbs what the trials could not show: the ingress reprograms on its own schedule, and a p99 of few trials understates rare delays.",
			fmtDur(r.MarginNS), r.MarginFrom))
	} else {
		out = append(out, "No valid trial recorded both the traffic end and a termination signal (prestop_called or sigterm): no recommendation.")
	}
	if n := d.Trials - d.Valid; n > 0 {
		var parts []string
		for _, k := range d.InvalidSorted() {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, d.InvalidReasons[k]))
		}
		out = append(out, fmt.Sprintf("%s left out of every percentile: %s.", plural(n, "invalid trial is", "invalid trials are"), strings.Join(parts, ", ")))
	}
	if _, ok := s.Dist(StageServerDeleteTime); ok {
		out = append(out, "server_delete_time is deletionTimestamp − grace at 1 s resolution: a cross-check of T0, not a measurement.")
	}
	return out
}

// fmtDur renders nanoseconds as seconds with millisecond precision.
func fmtDur(ns int64) string {
	return fmt.Sprintf("%.3fs", float64(ns)/1e9)
}

// trimFloat renders 99 as "99" and 99.9 as "99.9".
func trimFloat(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".")
}
