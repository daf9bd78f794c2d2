package upstream

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Reading is one poll of one replica on the tool's clock: the request left at
// Sent, the answer arrived at At; the controller read its state in between.
type Reading struct {
	Sent time.Time
	At   time.Time
}

// IsZero tells whether there was no such reading.
func (r Reading) IsZero() bool { return r.At.IsZero() }

// Removal is one observer replica's account of one address.
type Removal struct {
	Observer   string
	Replica    string
	Resolution time.Duration
	// LastPresent is the last poll that listed the address (upstream_last_present).
	LastPresent Reading
	// Removed is the first readable poll after LastPresent that did not list
	// it (upstream_removed); zero while the address is still listed or the
	// replica could not be read since.
	Removed Reading
	// Blind counts the polls after LastPresent (up to Removed) at which this
	// replica could not be read.
	Blind int
	// LastErr is the last such poll's error.
	LastErr error
}

// Key is the stage key, "observer/replica".
func (r Removal) Key() string { return r.Observer + "/" + r.Replica }

// Done tells whether the removal was seen.
func (r Removal) Done() bool { return !r.Removed.IsZero() }

// Bracket is the interval the change lies in: after the last-present poll was
// sent (the controller answered at or after that) and no later than the
// removed poll's answer arrived.
func (r Removal) Bracket() (after, notAfter time.Time) { return r.LastPresent.Sent, r.Removed.At }

// Invalid says why this replica's removal instant cannot be trusted to the
// observer's resolution, or "" when it can: a blind poll inside the bracket
// (the removal could have happened at any of them), or no removal seen while
// the replica was blind. A blind poll never counts as a removal.
func (r Removal) Invalid() string {
	what := "upstream"
	if r.Observer == KindDNS {
		what = "DNS server"
	}
	switch {
	case r.Done() && r.Blind > 0:
		return fmt.Sprintf(what+" %s was unreadable at %d poll(s) between last present (%s) and removed: the removal instant is not resolved to %s (%v)",
			r.Key(), r.Blind, r.LastPresent.At.Format(time.RFC3339Nano), r.Resolution, r.LastErr)
	case !r.Done() && r.Blind > 0:
		return fmt.Sprintf(what+" %s went unreadable after last listing the address at %s: its removal could not be seen (%v)",
			r.Key(), r.LastPresent.At.Format(time.RFC3339Nano), r.LastErr)
	case !r.Done():
		return fmt.Sprintf(what+" %s still listed the address at its last poll", r.Key())
	}
	return ""
}

// Appearance is one observer replica's account of an address's arrival in
// its list: the startup side's upstream_present.
type Appearance struct {
	Observer   string
	Replica    string
	Resolution time.Duration
	// LastAbsent is the last readable poll before FirstPresent, which did
	// not list the address; zero when the replica's first reading already
	// listed it (the arrival is then not bracketed: see Bounded).
	LastAbsent Reading
	// FirstPresent is the first poll that listed the address
	// (upstream_present).
	FirstPresent Reading
}

// Key is the stage key, "observer/replica".
func (a Appearance) Key() string { return a.Observer + "/" + a.Replica }

// Bounded tells whether a readable poll before the first listing did not
// list the address, so that the arrival lies in Bracket.
func (a Appearance) Bounded() bool { return !a.LastAbsent.IsZero() }

// Bracket is the interval the arrival lies in: after the last absent poll
// was sent (the controller read its state at or after that) and no later
// than the first present poll's answer arrived. Unreadable polls in between
// widen it, which is why it spans from the last readable one.
func (a Appearance) Bracket() (after, notAfter time.Time) {
	return a.LastAbsent.Sent, a.FirstPresent.At
}

// presence is the state of one address in one replica's list.
type presence struct {
	// firstPresent and lastAbsent are set once, at the address's first
	// listing by the replica, and survive later re-listings.
	firstPresent Reading
	lastAbsent   Reading
	lastPresent  Reading
	removed      Reading
	blind        int
	lastErr      error
}

type replicaAddr struct {
	replica string
	addr    netip.AddrPort
}

// Tracker polls an Observer every interval and turns the readings into
// per-replica presence of each address it has seen. It keeps one small state
// per (replica, address) ever listed, not the snapshots, so memory is bounded
// by the addresses the Service had. Safe for concurrent use.
type Tracker struct {
	obs      Observer
	clock    clock.WithTicker
	interval time.Duration
	timeout  time.Duration

	mu       sync.Mutex
	state    map[replicaAddr]*presence
	replicas map[string]bool // every replica ever seen
	// lastRead is each replica's latest readable poll: the last absent
	// reading of an address the next poll lists for the first time.
	lastRead map[string]Reading
	latest   Snapshot
	pollErr  error // the latest poll's observer-wide error
	polls    int
	updated  chan struct{} // closed and replaced at each new snapshot
	log      pollLog
	notify   func(string)
}

// NewTracker tracks obs, polling every obs.Resolution() (its interval) on clk (nil: the
// real clock); each poll is bounded by timeout (zero: the interval, at least
// 1 s).
func NewTracker(obs Observer, clk clock.WithTicker, timeout time.Duration) *Tracker {
	if clk == nil {
		clk = clock.RealClock{}
	}
	iv := obs.Resolution()
	if iv <= 0 {
		iv = DefaultInterval
	}
	if timeout <= 0 {
		timeout = max(iv, time.Second)
	}
	return &Tracker{
		obs: obs, clock: clk, interval: iv, timeout: timeout,
		state:    map[replicaAddr]*presence{},
		replicas: map[string]bool{},
		lastRead: map[string]Reading{},
		updated:  make(chan struct{}),
	}
}

// Observer is the tracked observer.
func (t *Tracker) Observer() Observer { return t.obs }

// Run polls at once and then every interval until ctx ends; it returns nil
// then. Polls never overlap, and a poll that takes longer than the interval
// is followed by a pause as long as it took (nextPoll), reported through
// the notify function (SetNotify): a struggling controller is read less
// often, never harder, and the coarser resolution shows in the readings'
// stamps, in Stats and in every removal's Resolution.
func (t *Tracker) Run(ctx context.Context) error {
	if _, ok := t.obs.(noneObserver); ok {
		<-ctx.Done()
		return nil
	}
	tick := t.clock.NewTicker(t.interval)
	defer tick.Stop()
	for {
		start := t.clock.Now()
		snap, ok := t.pollOnce(ctx)
		if !ok {
			return nil
		}
		if !snap.Sent.IsZero() {
			start = snap.Sent
		}
		next, overrun := nextPoll(start, snap.At.Sub(start), t.interval)
		var bytes int64
		for _, r := range snap.Replicas {
			bytes += r.Bytes
		}
		stretched := false
		if gap := budgetGap(bytes); gap > next.Sub(start) {
			next, stretched = start.Add(gap), true
			t.mu.Lock()
			t.log.gap = max(t.log.gap, gap)
			t.log.stretched++
			first := t.log.stretched == 1
			notify := t.notify
			t.mu.Unlock()
			if first && notify != nil {
				notify(fmt.Sprintf("%s observer: a poll reads %d kB; to stay within %d kB/s it polls every %s, not every %s",
					t.obs.Name(), bytes/1000, ByteBudget/1000, gap.Round(time.Millisecond), t.interval))
			}
		}
		if overrun {
			t.mu.Lock()
			notify := t.notify
			t.mu.Unlock()
			if notify != nil {
				notify(fmt.Sprintf("%s observer: a poll took %s, longer than the %s interval; the next waits %s (no polls stacked on the controller)",
					t.obs.Name(), snap.At.Sub(start).Round(time.Millisecond), t.interval, next.Sub(snap.At).Round(time.Millisecond)))
			}
		}
		if overrun || stretched {
			// The pause is measured from the poll's own stamps, so a
			// clock that moved on meanwhile shortens it (down to none);
			// the tick that came during the poll or the pause is dropped.
			if wait := next.Sub(t.clock.Now()); wait > 0 {
				timer := t.clock.NewTimer(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					return nil
				case <-timer.C():
				}
			}
			select {
			case <-tick.C():
			default:
			}
			continue
		}
		// Within the interval: the ticker keeps the cadence, and drops
		// ticks that come while a poll runs.
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}

// SetNotify sets the function told when a poll overran the interval and
// the tracker backed off (measure reports it as progress).
func (t *Tracker) SetNotify(f func(string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.notify = f
}

// Stats is what the polls so far cost and resolve.
func (t *Tracker) Stats() PollStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.log.stats(t.interval)
}

// pollOnce polls under the timeout and feeds the result to Add; false when
// ctx ended (an aborted poll is no reading).
func (t *Tracker) pollOnce(ctx context.Context) (Snapshot, bool) {
	pctx, cancel := context.WithTimeout(ctx, t.timeout)
	start := t.clock.Now()
	snap, err := t.obs.Poll(pctx)
	cancel()
	if ctx.Err() != nil {
		return snap, false
	}
	if snap.Sent.IsZero() {
		snap.Sent = start
	}
	if snap.At.IsZero() {
		snap.At = t.clock.Now()
	}
	t.Add(snap, err)
	return snap, true
}

// Add feeds one poll's result into the tracker; Run calls it. A non-nil err
// (the observer could not read any replica) makes every known replica blind
// for this poll.
func (t *Tracker) Add(snap Snapshot, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.polls++
	t.latest, t.pollErr = snap, err
	var bytes int64
	for _, r := range snap.Replicas {
		bytes += r.Bytes
	}
	t.log.add(snap.Sent, snap.At, bytes, snap.At.Sub(snap.Sent) > t.interval)
	read := map[string]bool{}
	for _, r := range snap.Replicas {
		t.replicas[r.Replica] = true
		rd := Reading{Sent: r.Sent, At: r.At}
		if rd.IsZero() {
			rd = Reading{Sent: snap.Sent, At: snap.At}
		}
		if r.Err != nil {
			t.markBlind(r.Replica, r.Err)
			continue
		}
		read[r.Replica] = true
		listed := map[netip.AddrPort]bool{}
		for _, a := range r.Upstreams {
			listed[a] = true
			k := replicaAddr{r.Replica, a}
			p := t.state[k]
			if p == nil {
				p = &presence{firstPresent: rd, lastAbsent: t.lastRead[r.Replica]}
				t.state[k] = p
			}
			*p = presence{firstPresent: p.firstPresent, lastAbsent: p.lastAbsent, lastPresent: rd}
		}
		for k, p := range t.state {
			if k.replica == r.Replica && !listed[k.addr] && p.removed.IsZero() {
				p.removed = rd
			}
		}
		t.lastRead[r.Replica] = rd
	}
	// A replica missing from this poll (its pod gone, or the observer blind)
	// was not read: blind, not removed.
	for rep := range t.replicas {
		if !read[rep] && !slices.ContainsFunc(snap.Replicas, func(r ReplicaUpstreams) bool { return r.Replica == rep }) {
			why := err
			if why == nil {
				why = fmt.Errorf("replica %s not in this poll", rep)
			}
			t.markBlind(rep, why)
		}
	}
	close(t.updated)
	t.updated = make(chan struct{})
}

func (t *Tracker) markBlind(replica string, err error) {
	for k, p := range t.state {
		if k.replica == replica && p.removed.IsZero() {
			p.blind++
			p.lastErr = err
		}
	}
}

// matches compares an address with a listed one; port 0 on either side
// matches any port (an --upstreams-cmd that prints bare IPs).
func matches(q, listed netip.AddrPort) bool {
	return q.Addr().Unmap() == listed.Addr().Unmap() && (q.Port() == 0 || listed.Port() == 0 || q.Port() == listed.Port())
}

// Removals gives, per replica that ever listed addr, its last-present and
// removed readings, sorted by replica. Call it at the end of a trial; a
// replica that never listed the address is not in the result.
func (t *Tracker) Removals(addr netip.AddrPort) []Removal {
	t.mu.Lock()
	defer t.mu.Unlock()
	res := t.log.stats(t.interval).Resolution()
	byRep := map[string]*Removal{}
	pending := map[string]bool{}
	for k, p := range t.state {
		if !matches(addr, k.addr) {
			continue
		}
		r := byRep[k.replica]
		if r == nil {
			r = &Removal{Observer: t.obs.Name(), Replica: k.replica, Resolution: res}
			byRep[k.replica] = r
		}
		// Several listed entries can match (port 0): the address is routed
		// while any is listed, so it is removed when the last one is.
		if p.lastPresent.At.After(r.LastPresent.At) {
			r.LastPresent = p.lastPresent
		}
		if p.removed.IsZero() {
			pending[k.replica] = true
		} else if p.removed.At.After(r.Removed.At) {
			r.Removed = p.removed
		}
		if p.blind > r.Blind {
			r.Blind, r.LastErr = p.blind, p.lastErr
		}
	}
	out := make([]Removal, 0, len(byRep))
	for rep, r := range byRep {
		if pending[rep] {
			r.Removed = Reading{}
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Removal) int { return strings.Compare(a.Replica, b.Replica) })
	return out
}

// Appearances gives, per replica that lists addr, its first listing and
// the readable poll before it, sorted by replica. A replica that never
// listed the address is not in the result.
func (t *Tracker) Appearances(addr netip.AddrPort) []Appearance {
	t.mu.Lock()
	defer t.mu.Unlock()
	res := t.log.stats(t.interval).Resolution()
	byRep := map[string]*Appearance{}
	for k, p := range t.state {
		if !matches(addr, k.addr) {
			continue
		}
		a := byRep[k.replica]
		if a == nil {
			a = &Appearance{Observer: t.obs.Name(), Replica: k.replica, Resolution: res,
				LastAbsent: p.lastAbsent, FirstPresent: p.firstPresent}
			byRep[k.replica] = a
			continue
		}
		// Several listed entries can match (port 0): the address is routed
		// from the first one listed.
		if p.firstPresent.At.Before(a.FirstPresent.At) {
			a.LastAbsent, a.FirstPresent = p.lastAbsent, p.firstPresent
		}
	}
	out := make([]Appearance, 0, len(byRep))
	for _, a := range byRep {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Appearance) int { return strings.Compare(a.Replica, b.Replica) })
	return out
}

// Latest returns the latest snapshot (zero before the first poll) and a
// channel closed when a newer one arrives.
func (t *Tracker) Latest() (Snapshot, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.latest, t.updated
}

// Steady tells whether, at the latest poll, every replica was read and lists
// every one of addrs; otherwise it says what is missing. The trial loop waits
// for it before each deletion.
func (t *Tracker) Steady(addrs []netip.AddrPort) (bool, string) {
	if _, ok := t.obs.(noneObserver); ok {
		// Nothing is observed (--observer none, and --observer dns, whose
		// answers a tracker of their own follows): Run never polls it.
		return true, ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.polls == 0 {
		return false, fmt.Sprintf("%s observer: no poll yet", t.obs.Name())
	}
	if t.pollErr != nil {
		return false, t.pollErr.Error()
	}
	if len(t.latest.Replicas) == 0 {
		return false, fmt.Sprintf("%s observer: no replica to read", t.obs.Name())
	}
	for _, r := range t.latest.Replicas {
		if r.Err != nil {
			return false, r.Err.Error()
		}
		for _, a := range addrs {
			if !slices.ContainsFunc(r.Upstreams, func(l netip.AddrPort) bool { return matches(a, l) }) {
				return false, fmt.Sprintf("%s/%s does not list %s yet", t.obs.Name(), r.Replica, a)
			}
		}
	}
	return true, ""
}

// Gone tells whether, at the latest poll, every replica was read and none
// lists addr; the trial loop releases the probe after it (and a quiet period).
func (t *Tracker) Gone(addr netip.AddrPort) (bool, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.polls == 0 {
		return false, fmt.Sprintf("%s observer: no poll yet", t.obs.Name())
	}
	if t.pollErr != nil {
		return false, t.pollErr.Error()
	}
	for _, r := range t.latest.Replicas {
		if r.Err != nil {
			return false, r.Err.Error()
		}
		if slices.ContainsFunc(r.Upstreams, func(l netip.AddrPort) bool { return matches(addr, l) }) {
			return false, fmt.Sprintf("%s/%s still lists %s", t.obs.Name(), r.Replica, addr)
		}
	}
	return true, ""
}

// Forget drops what the tracker holds about addr (after its trial), so the
// state stays as small as the Service's current addresses.
func (t *Tracker) Forget(addr netip.AddrPort) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.state {
		if matches(addr, k.addr) {
			delete(t.state, k)
		}
	}
}

// WaitFor blocks until cond holds after some poll, or ctx ends.
func (t *Tracker) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		_, next := t.Latest()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-next:
		}
	}
}
