package measure

import (
	"slices"
	"strconv"
	"time"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

// streamInput is what one trial's stream record is built from: the
// holder's events (tool clock, stamped at the door), the deleted pod, its
// SIGTERM and the data plane's withdrawal of its endpoint, both on the tool
// clock (SIGTERM corrected for skew; withdrawal zero if unknown), and the
// end of the observation (streams still open then are unclosed).
type streamInput struct {
	events    []load.StreamEvent
	pod       string
	sigterm   time.Time
	withdrawn time.Time
	until     time.Time
	probeLog  *probe.StreamLog
	// probeSkew is the pod's clock minus the tool's (the skew estimate's
	// offset): the probe's stream ends move onto the tool clock by it.
	probeSkew time.Duration
	protocol  string
	drain     string
	reconnect string
}

// streamTrial builds a trial's StreamTrial: the clients' streams to pod
// open at SIGTERM, how and when each ended, and for each ended one the
// slot's next open (the re-open), with the failed attempts between.
func streamTrial(in streamInput) *results.StreamTrial {
	t := &results.StreamTrial{Protocol: in.protocol, Drain: in.drain, Reconnect: in.reconnect,
		HerdBinNS: int64(results.HerdBin)}
	if in.probeLog != nil {
		t.ProbeEnds = in.probeLog.Ended
		t.ProbeOpenAtSigterm = in.probeLog.OpenAtSigterm
	}
	ev := slices.Clone(in.events)
	slices.SortStableFunc(ev, func(a, b load.StreamEvent) int { return a.At.Compare(b.At) })
	// Per slot: the open stream (its open event index, -1: none) and, once
	// a stream of the pod closed, the close awaiting its re-open.
	type slotState struct {
		openPod   string
		openAt    time.Time
		isOpen    bool
		tracked   bool // the open stream is one of the pod's at SIGTERM
		closedAt  time.Time
		awaitOpen bool
	}
	slots := map[int]*slotState{}
	get := func(i int) *slotState {
		if slots[i] == nil {
			slots[i] = &slotState{}
		}
		return slots[i]
	}
	probeEnds := streamEnds(in.probeLog, in.probeSkew)
	var closes, reopens []time.Time
	var fails []attempt
	sigtermSeen := false
	markSigterm := func() {
		if sigtermSeen {
			return
		}
		sigtermSeen = true
		for _, s := range slots {
			if s.isOpen && s.openPod == in.pod {
				s.tracked = true
				t.OpenAtSigterm++
			}
		}
	}
	for _, e := range ev {
		if !e.At.Before(in.sigterm) {
			markSigterm()
		}
		if !in.until.IsZero() && e.At.After(in.until) {
			break
		}
		s := get(e.Slot)
		switch e.Kind {
		case load.EventOpen:
			s.isOpen, s.openPod, s.openAt, s.tracked = true, e.Pod, e.At, false
			if s.awaitOpen {
				s.awaitOpen = false
				reopens = append(reopens, e.At)
				t.ReestablishNS = append(t.ReestablishNS, int64(e.At.Sub(s.closedAt)))
				if t.Reopened == nil {
					t.Reopened = map[string]int{}
				}
				t.Reopened[e.Pod]++
			}
		case load.EventClose:
			if s.tracked {
				t.Closed++
				closes = append(closes, e.At)
				// The code goes with the kind when there is one: a
				// close frame's or a status's, and for a gRPC stream
				// that broke, the status grpc-go made of it
				// (UNAVAILABLE for a lost transport, a reset
				// stream's code otherwise: load.grpcCloseKind).
				kind := e.How
				if e.Code >= 0 {
					kind += " " + strconv.Itoa(e.Code)
				}
				if load.Graceful(e.How) {
					t.Graceful++
				} else {
					t.Abrupt++
				}
				if t.CloseKinds == nil {
					t.CloseKinds = map[string]int{}
				}
				t.CloseKinds[kind]++
				s.awaitOpen, s.closedAt = true, e.At
				if end, ok := probeEnds[e.Stream]; ok && e.Stream != "" {
					t.ProbeMatched++
					t.CloseLagNS = append(t.CloseLagNS, int64(e.At.Sub(end)))
				}
			}
			s.isOpen, s.tracked = false, false
		case load.EventFail:
			if s.awaitOpen {
				// An event without its start (an older holder's) is a
				// failure at an instant.
				began := e.Began
				if began.IsZero() || began.After(e.At) {
					began = e.At
				}
				fails = append(fails, attempt{began, e.At})
				if t.Failures == nil {
					t.Failures = map[string]int{}
				}
				t.Failures[e.How]++
			}
		}
	}
	markSigterm()
	t.Unclosed = t.OpenAtSigterm - t.Closed
	if len(closes) > 0 {
		first, last := int64(closes[0].Sub(in.sigterm)), int64(closes[len(closes)-1].Sub(in.sigterm))
		t.FirstCloseNS, t.LastCloseNS = &first, &last
	}
	// Streams still open when the observation ended closed later, if at
	// all: their last close is at least until − SIGTERM (the summary reads
	// it as a floor), even when none closed while observed.
	if !in.until.IsZero() && t.OpenAtSigterm > 0 {
		observed := int64(in.until.Sub(in.sigterm))
		t.ObservedNS = &observed
	}
	if !in.withdrawn.IsZero() && t.OpenAtSigterm > 0 {
		open := t.Unclosed
		for _, c := range closes {
			if c.After(in.withdrawn) {
				open++
			}
		}
		t.OpenAtWithdrawal = &open
		switch {
		case t.Unclosed > 0 && !in.until.IsZero():
			out := int64(in.until.Sub(in.withdrawn)) // a floor
			t.OutliveNS = &out
		case open > 0 && len(closes) > 0:
			out := int64(closes[len(closes)-1].Sub(in.withdrawn))
			t.OutliveNS = &out
		}
	}
	if len(closes) > 0 {
		t.Herd = herd(closes[0], reopens, results.HerdBin)
		t.HerdPeak = busiest(reopens, results.HerdBin)
		t.HerdCleanPeak = busiestClean(reopens, fails, results.HerdBin)
	}
	slices.Sort(t.ReestablishNS)
	slices.Sort(t.CloseLagNS)
	return t
}

// streamEnds is the probe's end of each stream it has a client id for, on
// the tool clock: from its records (read through /timeline while it ran)
// and from the termination message's compact ends (the streams that ended
// at its exit, after the last read).
func streamEnds(l *probe.StreamLog, skew time.Duration) map[string]time.Time {
	if l == nil {
		return nil
	}
	out := map[string]time.Time{}
	for _, r := range l.Records {
		if r.Client != "" && r.Ended != nil {
			out[r.Client] = r.Ended.Add(-skew)
		}
	}
	for _, e := range l.Ends {
		out[e.Client] = time.Unix(0, e.EndNS).Add(-skew)
	}
	return out
}

// busiest is the most instants in any window of width w (sliding, not
// binned: a burst that straddles a bin edge counts whole). at is sorted.
func busiest(at []time.Time, w time.Duration) int {
	best, lo := 0, 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// attempt is a failed re-open attempt: from its start to its failure.
type attempt struct{ began, failed time.Time }

// busiestClean is the most instants of at in a window of width at most w
// that no failed attempt overlaps: each window starts at an instant of at
// that no attempt spans and is cut short where the next attempt begins. An
// attempt counts from its start, not only where it failed: one begun in a
// burst and timed out after it was not taken, and the burst is no proof of
// what the survivors could take. at is sorted.
func busiestClean(at []time.Time, fails []attempt, w time.Duration) int {
	best := 0
	for lo := range at {
		end, clean := at[lo].Add(w), true
		for _, f := range fails {
			switch {
			case f.failed.Before(at[lo]):
				// over before the window
			case !f.began.After(at[lo]):
				clean = false // it spans the window's start
			case f.began.Before(end):
				end = f.began
			}
		}
		if !clean {
			continue
		}
		// The first instant at or after end.
		hi, _ := slices.BinarySearchFunc(at, end, func(a, e time.Time) int { return a.Compare(e) })
		best = max(best, hi-lo)
	}
	return best
}

// herd counts the instants per bin from start.
func herd(start time.Time, at []time.Time, bin time.Duration) []int {
	var out []int
	for _, a := range at {
		i := int(a.Sub(start) / bin)
		if i < 0 {
			i = 0
		}
		if i >= len(out) {
			out = append(out, make([]int, i-len(out)+1)...)
		}
		out[i]++
	}
	return out
}
