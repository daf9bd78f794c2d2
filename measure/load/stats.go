package load

import (
	"math"
	"math/bits"
	"sort"
	"sync/atomic"
	"time"
)

// Failure kinds, the keys of Failures. Status codes other than 2xx are
// "status_<code>", e.g. "status_502".
const (
	// KindRefused: the connect was refused (ECONNREFUSED): nothing listens.
	KindRefused = "refused"
	// KindReset: the peer reset the connection (ECONNRESET, EPIPE).
	KindReset = "reset"
	// KindTimeout: no complete response within Config.Timeout, or a
	// network-level timeout.
	KindTimeout = "timeout"
	// KindEOF: the peer closed the connection before a complete response.
	KindEOF = "eof"
	// KindUnreachable: no route to the host or network.
	KindUnreachable = "unreachable"
	// KindOther: any other transport error.
	KindOther = "other"
	// KindUnattributed: a 2xx response with neither the probe's traffic
	// body nor X-Epwindow-Pod, so something other than a probe answered (a
	// default backend, a cache).
	KindUnattributed = "unattributed"
	// KindDropped: the request was due while Config.MaxConns requests were in
	// flight and was not sent. It is the generator's limit, not the cluster's,
	// but it leaves a gap in the traffic, so it is recorded like a failure.
	KindDropped = "dropped"
)

// PodStats is what the generator saw of one pod, by the name it answered
// with (the traffic body, or X-Epwindow-Pod).
// Instants are on the tool's clock.
type PodStats struct {
	Pod string
	// Responses counts 2xx responses attributed to the pod.
	Responses int64
	// FirstSent/First are when the first attributed response's request was
	// sent and when its first response byte arrived; LastSent/Last the same
	// for the last one (client_last_routed: the request was routed to the pod
	// between LastSent and Last).
	FirstSent, First time.Time
	LastSent, Last   time.Time
	// Addr is the address the last response came from (the gRPC mode's
	// peer; empty for HTTP, where it is the ingress's).
	Addr string
	// Skew is the tightest clock-offset estimate from this pod's responses;
	// Skew.Samples is 0 if none carried a readable clock.
	Skew Estimate
}

// Totals is a snapshot of the whole run, for progress lines and benchmarks.
type Totals struct {
	// Hits = Sent + Dropped: requests the schedule called for so far.
	Hits, Sent, Dropped int64
	// OK counts 2xx responses (attributed or not), Failed every failure
	// except drops, Unattributed the 2xx responses without a pod name
	// (also counted in OK and in Failures as KindUnattributed).
	OK, Failed, Unattributed int64
	// InFlight is requests sent and not yet finished.
	InFlight int64
	// PodsOverflow counts attributed responses from pods beyond the
	// per-pod table's capacity (16384 pods), not in any PodStats.
	PodsOverflow int64
	// Start is when Run began, Latest when the last request was sent.
	Start, Latest time.Time
	// Rate is Sent over [Start, Latest], requests per second, as vegeta
	// computes its "rate"; 0 until two requests were sent.
	Rate float64
	// Latency is from the start of each request (its goroutine began
	// building it; connect included) to its last body byte, over finished
	// requests, successes and failures alike: what vegeta calls latency.
	// Percentiles are read from a log-linear histogram with 1/128 relative
	// bucket width; LatencyN is how many requests they are over (report it
	// next to them).
	LatencyN                                       int64
	LatencyP50, LatencyP90, LatencyP99, LatencyMax time.Duration
	// Lag is how late requests started after their scheduled instant (timer
	// and goroutine wake-up): the generator keeping its schedule or not.
	LagP50, LagP99, LagMax time.Duration
	// FailuresKeptSince is the start of the failure history: Failures is
	// complete for windows starting at or after it (zero if nothing was ever
	// overwritten).
	FailuresKeptSince time.Time
}

// histogram is a fixed-size log-linear latency histogram, safe for
// concurrent use without locks: values below 2^subBits ns are exact, above
// that each power of two is split into 2^subBits buckets.
type histogram struct {
	counts [64 << subBits]atomic.Int64
	n      atomic.Int64
	max    atomic.Int64
}

const subBits = 7

func bucketOf(ns int64) int {
	if ns < 1<<subBits {
		if ns < 0 {
			return 0
		}
		return int(ns)
	}
	exp := bits.Len64(uint64(ns)) - 1 - subBits // ≥ 0
	mant := int(ns>>uint(exp)) & (1<<subBits - 1)
	return (exp+1)<<subBits + mant
}

// bucketMid is the midpoint of bucket b's value range.
func bucketMid(b int) int64 {
	if b < 1<<subBits {
		return int64(b)
	}
	exp := b>>subBits - 1
	mant := int64(b & (1<<subBits - 1))
	lo := (1<<subBits + mant) << uint(exp)
	return lo + (int64(1)<<uint(exp))/2
}

func (h *histogram) add(d time.Duration) {
	ns := int64(d)
	h.counts[bucketOf(ns)].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if ns <= m || h.max.CompareAndSwap(m, ns) {
			return
		}
	}
}

// quantiles returns the q-quantiles (0 < q ≤ 1) in ascending order of qs,
// each the midpoint of the bucket holding the ceil(q·n)-th smallest value.
func (h *histogram) quantiles(qs ...float64) (n int64, out []time.Duration) {
	n = h.n.Load()
	out = make([]time.Duration, len(qs))
	if n == 0 {
		return 0, out
	}
	var seen int64
	qi := 0
	for b := range h.counts {
		seen += h.counts[b].Load()
		for qi < len(qs) && float64(seen) >= math.Ceil(qs[qi]*float64(n)) {
			out[qi] = time.Duration(bucketMid(b))
			qi++
		}
		if qi == len(qs) {
			break
		}
	}
	// A bucket's midpoint can exceed the largest value actually seen.
	m := time.Duration(h.max.Load())
	for i := range out {
		out[i] = min(out[i], m)
	}
	return n, out
}

// failureRing keeps the last len(events) failures; the caller holds the lock.
type failureRing struct {
	events  []failureEvent
	next    int  // index of the next write
	wrapped bool // every slot holds an event
	// lost is the latest instant of any overwritten event: events are added
	// when requests finish, not in instant order, so the oldest kept event
	// does not mark where the history becomes complete.
	lost    int64
	kinds   []string
	kindIdx map[string]uint32
	// totals counts every failure ever added, by kind index: the ring
	// forgets, the totals do not.
	totals []int64
}

type failureEvent struct {
	at   int64 // unix ns, tool clock
	kind uint32
}

func newFailureRing(n int) *failureRing {
	return &failureRing{events: make([]failureEvent, n), kindIdx: map[string]uint32{}}
}

func (f *failureRing) add(at time.Time, kind string) {
	k, ok := f.kindIdx[kind]
	if !ok {
		// Kinds are few (a dozen error classes and the status codes seen).
		k = uint32(len(f.kinds))
		f.kinds = append(f.kinds, kind)
		f.kindIdx[kind] = k
		f.totals = append(f.totals, 0)
	}
	f.totals[k]++
	if f.wrapped {
		f.lost = max(f.lost, f.events[f.next].at)
	}
	f.events[f.next] = failureEvent{at: at.UnixNano(), kind: k}
	f.next++
	if f.next == len(f.events) {
		f.next = 0
		f.wrapped = true
	}
}

// keptSince is the instant from which the kept history is complete: just
// after the latest overwritten event, or zero if none was overwritten.
func (f *failureRing) keptSince() time.Time {
	if !f.wrapped || f.lost == 0 {
		return time.Time{}
	}
	return time.Unix(0, f.lost+1)
}

// Failure is one failed request: its scheduled instant (tool clock) and
// kind (the Kind* constants, or "status_<code>").
type Failure struct {
	At   time.Time
	Kind string
}

// list returns the kept events with from ≤ at < to, sorted by instant.
func (f *failureRing) list(from, to time.Time) []Failure {
	lo, hi := bounds(from, to)
	var out []Failure
	for _, e := range f.kept() {
		if e.at >= lo && e.at < hi {
			out = append(out, Failure{At: time.Unix(0, e.at), Kind: f.kinds[e.kind]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// kept is the part of the ring that holds events.
func (f *failureRing) kept() []failureEvent {
	if f.wrapped {
		return f.events
	}
	return f.events[:f.next]
}

// bounds turns [from, to) into unix ns, a zero instant meaning open.
func bounds(from, to time.Time) (lo, hi int64) {
	lo, hi = math.MinInt64, math.MaxInt64
	if !from.IsZero() {
		lo = from.UnixNano()
	}
	if !to.IsZero() {
		hi = to.UnixNano()
	}
	return lo, hi
}

// count counts the kept events with from ≤ at < to by kind; a zero from or
// to leaves that side open.
func (f *failureRing) count(from, to time.Time) map[string]int {
	out := map[string]int{}
	lo, hi := bounds(from, to)
	for _, e := range f.kept() {
		if e.at >= lo && e.at < hi {
			out[f.kinds[e.kind]]++
		}
	}
	return out
}

// total is every failure added so far, by kind.
func (f *failureRing) total() map[string]int {
	out := make(map[string]int, len(f.kinds))
	for i, k := range f.kinds {
		out[k] = int(f.totals[i])
	}
	return out
}
