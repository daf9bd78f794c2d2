package verify

import (
	"time"
)

// podTimes is what attribution knows of one pod of a rollout, on the tool's
// clock. Zero instants were not seen.
type podTimes struct {
	Name string
	// Ready is when a pod created by the rollout was first seen Ready
	// (zero for the pods it replaced).
	Ready time.Time
	// Deleted is when a replaced pod was first seen with a
	// deletionTimestamp; LeftSlices when its address was then no longer
	// ready in any EndpointSlice.
	Deleted    time.Time
	LeftSlices time.Time
	// Checked is set when the pod's port was read through the pod proxy;
	// FirstAnswer is the first answer there, FirstRefusal the first failed
	// read after Deleted.
	Checked      bool
	FirstAnswer  time.Time
	FirstRefusal time.Time
}

// attribution is where one failure is attributed.
type attribution struct {
	Side  string
	Pod   string
	Since time.Duration
	Basis string
}

// attribute decides which side of which pod a failure at `at` (the request's
// scheduled instant) belongs to.
//
// With listener state (--check-port) a pod is a hazard while it can be
// routed to but does not answer. A new pod from Ready until its first
// answer (startup) is a certain hazard: its address is ready in the slices.
// A replaced pod from its first refusal (less one poll, res, the resolution
// of that instant) is a certain hazard while its address is still ready in
// the slices, and a possible one for lag after it left them, lag being how
// long the ingress may still route to it (the window estimate). A certain
// hazard beats a possible one; among equals, the one that began last is the
// likeliest cause. Without listener state covering `at`, the latest
// deletion or Ready before `at` is taken (timing): a rolling update deletes
// an old pod right after a new one is Ready, so timing alone cannot tell the
// sides apart when both happen within the window.
func attribute(at time.Time, pods []podTimes, res, lag time.Duration) attribution {
	best := attribution{Side: SideUnknown, Basis: BasisTiming}
	var bestStart time.Time
	bestRank := 0
	consider := func(rank int, start time.Time, a attribution) {
		if rank > bestRank || rank == bestRank && (bestStart.IsZero() || start.After(bestStart)) {
			bestRank, bestStart, best = rank, start, a
		}
	}
	const timing, possible, certain = 1, 2, 3
	for _, p := range pods {
		if !p.Checked {
			continue
		}
		if !p.Ready.IsZero() && !at.Before(p.Ready) && (p.FirstAnswer.IsZero() || at.Before(p.FirstAnswer)) {
			consider(certain, p.Ready, attribution{SideStartup, p.Name, at.Sub(p.Ready), BasisListener})
		}
		if !p.Deleted.IsZero() && !p.FirstRefusal.IsZero() {
			start := p.FirstRefusal.Add(-res)
			a := attribution{SideShutdown, p.Name, at.Sub(p.Deleted), BasisListener}
			switch {
			case at.Before(start):
			case p.LeftSlices.IsZero() || at.Before(p.LeftSlices):
				consider(certain, start, a)
			case !at.After(p.LeftSlices.Add(lag)):
				consider(possible, start, a)
			}
		}
	}
	if best.Basis == BasisListener {
		return best
	}
	for _, p := range pods {
		if !p.Deleted.IsZero() && !at.Before(p.Deleted) {
			consider(timing, p.Deleted, attribution{SideShutdown, p.Name, at.Sub(p.Deleted), BasisTiming})
		}
		if !p.Ready.IsZero() && !at.Before(p.Ready) {
			consider(timing, p.Ready, attribution{SideStartup, p.Name, at.Sub(p.Ready), BasisTiming})
		}
	}
	return best
}
