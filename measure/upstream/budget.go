package upstream

import (
	"slices"
	"time"
)

// pollWindow is how many recent polls PollStats' quantiles cover: enough
// for a p99 that means the 99th percentile (at least 100 polls), bounded so
// that a day-long run's memory does not grow.
const pollWindow = 1024

// ByteBudget is the most an observer reads from a controller per second on
// average: a poll of B bytes is followed by at least B/ByteBudget seconds
// before the next, so a 2,000-route Skipper table (780 kB) at a 500 ms
// interval is read every 780 ms, not every 500 ms.
const ByteBudget = 1_000_000

// PollStats is what an observer's polls have cost and resolve so far.
type PollStats struct {
	// Interval is the poll interval asked for (--observer-interval).
	Interval time.Duration
	// Polls counts the polls made; Overruns those that took longer than
	// Interval, after each of which the tracker backed off (nextPoll).
	Polls    int
	Overruns int
	// P99 is the 99th percentile of the poll time (request sent to last
	// response read, every replica) over the last pollWindow polls, by
	// nearest rank: with fewer than 100 polls it is their maximum. Max is
	// the longest poll of the run.
	P99 time.Duration
	Max time.Duration
	// Bytes is what every poll read from the controller, in total; Span the
	// time from the first poll's start to the last one's end. Paced is what
	// every poll but the last read, over the time from the first poll's
	// start to the last one's: the polls' own spacing, which the byte
	// budget sets.
	Bytes int64
	Span  time.Duration
	Paced struct {
		Bytes int64
		Span  time.Duration
	}
	// Gap is the longest start-to-start spacing the byte budget imposed
	// (0 when it never stretched the interval); Stretched counts the polls
	// it stretched.
	Gap       time.Duration
	Stretched int
	// Spacing is the 99th percentile (nearest rank, as P99) of the
	// start-to-start spacing the polls kept, over the last pollWindow
	// spacings: the interval, or more after an overrun (2×took, nextPoll)
	// or a stretch of the byte budget. 0 before a second poll.
	Spacing time.Duration
}

// Resolution is how finely the observer's readings resolve a change: a
// change can fall just after a poll's request reached the controller and is
// seen only by the next poll's answer, up to one spacing plus one poll time
// later. The spacing is the one kept (p99, at least the interval and the
// budget's gap), not the one asked for: a poll that overran is followed by
// twice its time (nextPoll). p99s, so 1 reading in 100 can be coarser.
func (s PollStats) Resolution() time.Duration { return max(s.Interval, s.Gap, s.Spacing) + s.P99 }

// BytesPerMinute is the observer's read traffic: each poll's bytes over
// the time until the next poll began (Paced), the rate a controller sees
// while the observer runs. Bytes over Span would count N polls' bytes over
// N−1 spacings, overstating a paced observer by N/(N−1) — 5% over 20 polls.
// With one poll it is that poll's bytes over its own time; 0 before a poll
// has taken time.
func (s PollStats) BytesPerMinute() float64 {
	if s.Paced.Span > 0 {
		return float64(s.Paced.Bytes) / s.Paced.Span.Minutes()
	}
	if s.Span <= 0 {
		return 0
	}
	return float64(s.Bytes) / s.Span.Minutes()
}

// pollLog keeps the recent poll times and running totals for PollStats.
type pollLog struct {
	took      ring // the last pollWindow poll times
	spacing   ring // the last pollWindow start-to-start spacings
	polls     int
	overruns  int
	max       time.Duration
	bytes     int64
	first     time.Time
	last      time.Time
	lastStart time.Time
	lastBytes int64
	gap       time.Duration
	stretched int
}

func (l *pollLog) add(start, end time.Time, bytes int64, overrun bool) {
	d := end.Sub(start)
	l.took.add(d)
	if l.polls == 0 {
		l.first = start
	} else {
		l.spacing.add(start.Sub(l.lastStart))
	}
	l.polls++
	l.last = end
	l.lastStart = start
	l.lastBytes = bytes
	l.max = max(l.max, d)
	l.bytes += bytes
	if overrun {
		l.overruns++
	}
}

func (l *pollLog) stats(interval time.Duration) PollStats {
	s := PollStats{Interval: interval, Polls: l.polls, Overruns: l.overruns, Max: l.max, Bytes: l.bytes, Span: l.last.Sub(l.first),
		Gap: l.gap, Stretched: l.stretched}
	if l.polls > 1 {
		s.Paced.Bytes, s.Paced.Span = l.bytes-l.lastBytes, l.lastStart.Sub(l.first)
	}
	s.P99, s.Spacing = l.took.p99(), l.spacing.p99()
	return s
}

// ring keeps the last pollWindow durations added.
type ring struct {
	d    []time.Duration
	next int
}

func (r *ring) add(d time.Duration) {
	if len(r.d) < pollWindow {
		r.d = append(r.d, d)
		return
	}
	r.d[r.next] = d
	r.next = (r.next + 1) % pollWindow
}

// p99 is the nearest-rank 99th percentile, the smallest value with at
// least 99% of the kept ones at or below it (their maximum below 100); 0
// when empty.
func (r *ring) p99() time.Duration {
	n := len(r.d)
	if n == 0 {
		return 0
	}
	sorted := slices.Clone(r.d)
	slices.Sort(sorted)
	return sorted[(99*n+99)/100-1]
}

// nextPoll is when the poll after one that started at start and took took
// may start. Within the interval it keeps the cadence (start + interval).
// A poll that took longer than the interval tells that the controller (or
// the way to it) is struggling: the next one waits as long again after it
// ended, so the observer never keeps more than half of the controller's
// time busy and never stacks polls; overrun says that this happened.
//
// budgetGap is the spacing the byte budget asks after a poll of bytes.
func nextPoll(start time.Time, took, interval time.Duration) (next time.Time, overrun bool) {
	if took <= interval {
		return start.Add(interval), false
	}
	return start.Add(2 * took), true
}

func budgetGap(bytes int64) time.Duration {
	return time.Duration(float64(bytes) / ByteBudget * float64(time.Second))
}
