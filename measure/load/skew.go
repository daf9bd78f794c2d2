package load

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/utils/clock"
)

// Estimate is a probe clock's offset from the tool's clock, from one
// request/response exchange (DESIGN.md "Clock skew"). With s the tool's clock
// just before the request went out, r the tool's clock when the response's
// first byte arrived, and p the probe's clock as it answered:
//
//	Offset = p − (s+r)/2, Uncertainty = (r−s)/2.
//
// The probe read its clock at some true instant between s and r, so the true
// offset lies within Offset ± Uncertainty (assuming the tool's clock is not
// stepped during the exchange); the exchange with the smallest round trip
// gives the tightest bound and wins.
type Estimate struct {
	// Offset is probe clock − tool clock.
	Offset time.Duration
	// Uncertainty bounds |true offset − Offset|: half the round trip.
	Uncertainty time.Duration
	// At is the tool-clock midpoint of the exchange the estimate came from.
	At time.Time
	// Samples is how many exchanges were considered.
	Samples int
}

// ToTool converts a probe-clock instant to the tool's clock: podTime − Offset.
func (e Estimate) ToTool(podTime time.Time) time.Time { return podTime.Add(-e.Offset) }

// String renders the estimate as "+1.5ms ±120µs (n=40)".
func (e Estimate) String() string {
	sign := "+"
	if e.Offset < 0 {
		sign = ""
	}
	return fmt.Sprintf("%s%v ±%v (n=%d)", sign, e.Offset, e.Uncertainty, e.Samples)
}

// sample makes an Estimate from one exchange; see Estimate for the bound.
func sample(s, r, p time.Time) Estimate {
	rtt := r.Sub(s)
	mid := s.Add(rtt / 2)
	// Round the half round trip up so that rounding mid down never puts the
	// true offset outside the bound.
	half := (rtt + 1) / 2
	return Estimate{Offset: p.Sub(mid), Uncertainty: half, At: mid, Samples: 1}
}

// better reports whether a is a tighter estimate than b (b may be zero).
func better(a, b Estimate) bool {
	return b.Samples == 0 || a.Uncertainty < b.Uncertainty
}

// merge folds estimate e into best, keeping the tighter one and summing the
// sample counts.
func merge(best, e Estimate) Estimate {
	n := best.Samples + e.Samples
	if better(e, best) {
		best = e
	}
	best.Samples = n
	return best
}

// Best returns the tightest of several estimates (for instance those of the
// pods on one node), with Samples summed; ok is false if none has a sample.
func Best(estimates ...Estimate) (best Estimate, ok bool) {
	for _, e := range estimates {
		if e.Samples > 0 {
			best = merge(best, e)
		}
	}
	return best, best.Samples > 0
}

// parseProbeTime reads an X-Epwindow-Time value: the probe's clock in unix ns.
func parseProbeTime(v string) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// ClockSample estimates a probe's clock offset without load: it calls get n
// times in a row (get would GET the probe's /clock, e.g. through the API
// server's pod proxy, and return the probe time it reported), stamps each call
// on clk, and returns the exchange with the smallest round trip. The bound is
// looser than under load because the proxy hops are inside the round trip.
// Failed calls are skipped; it fails only if no call succeeds or ctx ends
// before any does.
func ClockSample(ctx context.Context, clk clock.PassiveClock, get func(context.Context) (time.Time, error), n int) (Estimate, error) {
	if n <= 0 {
		return Estimate{}, fmt.Errorf("clock sample: need at least one exchange, got %d", n)
	}
	var best Estimate
	var errs []error
	for i := 0; i < n && ctx.Err() == nil; i++ {
		s := clk.Now()
		p, err := get(ctx)
		r := clk.Now()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		best = merge(best, sample(s, r, p))
	}
	if best.Samples > 0 {
		return best, nil
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return Estimate{}, fmt.Errorf("clock sample: no exchange succeeded: %w", errors.Join(errs...))
}
