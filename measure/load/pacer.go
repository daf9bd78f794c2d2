package load

import (
	"math"
	"time"
)

// ConstantPacer schedules requests at a constant Rate (requests per second):
// hit k (counting from 0) is due at k/Rate after the start. It is a pure
// function of the elapsed time and the hits already sent, like vegeta's
// ConstantPacer (lib/pacer.go), so the schedule never depends on responses.
type ConstantPacer struct {
	// Rate is in requests per second.
	Rate float64
}

// Due is when hit number hits (counting from 0) is scheduled, measured from
// the start. ok is false when the schedule cannot be represented (rate not
// positive, or beyond ~292 years).
func (p ConstantPacer) Due(hits uint64) (due time.Duration, ok bool) {
	if !(p.Rate > 0) || math.IsInf(p.Rate, 0) {
		return 0, false
	}
	ns := float64(hits) * 1e9 / p.Rate
	if ns >= math.MaxInt64 {
		return 0, false
	}
	return time.Duration(ns), true
}

// Pace returns how long to wait before sending the next hit, given the time
// elapsed since the start and the number of hits already sent. A hit that is
// already due (the sender fell behind) gets wait 0: the sender catches up at
// once instead of shifting the schedule. stop is true when no further hit can
// be scheduled (rate not positive, or the schedule overflows).
func (p ConstantPacer) Pace(elapsed time.Duration, hits uint64) (wait time.Duration, stop bool) {
	due, ok := p.Due(hits)
	if !ok {
		return 0, true
	}
	if due <= elapsed {
		return 0, false
	}
	return due - elapsed, false
}
