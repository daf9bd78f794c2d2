package measure

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

// maxStartups bounds the new pods followed at once. Each trial claims one
// (its replacement) and drops it once recorded, so only pods created and
// never claimed could pile up — a Deployment scaled by someone else.
const maxStartups = 1024

// startupWatch holds what the watches saw of one new probe pod, from its
// creation until it is routed. All instants are on the tool's clock.
type startupWatch struct {
	pod  string
	uid  types.UID
	addr netip.Addr // invalid until the pod's status has an IP
	// PodCreated: pod watch, the pod's first event (its ADDED), tool clock,
	// watch delivery (~ms).
	created time.Time
	// PodScheduled: pod watch, first event with spec.nodeName set (the
	// scheduler's binding), tool clock, ~ms.
	scheduled time.Time
	// PodReadyCondition: pod watch, first event with condition Ready=True,
	// tool clock, ~ms.
	ready time.Time
	// SliceReady: EndpointSlice watch, first state with the address ready in
	// the Service's slices, tool clock, ~ms.
	sliceReady time.Time
	claimed    bool
}

// applyStartupPod records what one pod event tells about a new pod.
func applyStartupPod(sw *startupWatch, seen time.Time, pod *corev1.Pod) {
	if sw.scheduled.IsZero() && pod.Spec.NodeName != "" {
		sw.scheduled = seen
	}
	if !sw.addr.IsValid() {
		if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			sw.addr = a
		}
	}
	if sw.ready.IsZero() && podReady(pod) {
		sw.ready = seen
	}
}

// applyStartupSlices records the first state in which the new pod's address
// is ready in the Service's slices.
func applyStartupSlices(sw *startupWatch, seen time.Time, slices []*discoveryv1.EndpointSlice) {
	if !sw.addr.IsValid() || !sw.sliceReady.IsZero() {
		return
	}
	if st, ok := addressState(slices, sw.addr); ok && st.Ready && !st.Terminating {
		sw.sliceReady = seen
	}
}

// startups follows the probe pods created after arm: the replacements whose
// startup stages the trials record. The watcher feeds it the events it has
// stamped; it keeps its own lock, never held while the watcher's is wanted.
type startups struct {
	mu    sync.Mutex
	armed bool
	known map[types.UID]bool // pods that existed at arm: not new
	pods  map[types.UID]*startupWatch
}

func newStartups() *startups {
	return &startups{known: map[types.UID]bool{}, pods: map[types.UID]*startupWatch{}}
}

// arm starts following every pod not in existing.
func (s *startups) arm(existing []*corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range existing {
		s.known[p.UID] = true
	}
	s.armed = true
}

// podEvent applies a stamped pod event; slices are the Service's cached
// slices, for a pod whose address is first learnt here.
func (s *startups) podEvent(seen time.Time, pod *corev1.Pod, deleted bool, slices func() []*discoveryv1.EndpointSlice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known[pod.UID] {
		if deleted {
			delete(s.known, pod.UID) // the set stays as small as the pods
		}
		return
	}
	if !s.armed {
		return
	}
	sw := s.pods[pod.UID]
	if sw == nil {
		if deleted || pod.DeletionTimestamp != nil || len(s.pods) >= maxStartups {
			return
		}
		sw = &startupWatch{pod: pod.Name, uid: pod.UID, created: seen}
		s.pods[pod.UID] = sw
	}
	if deleted {
		if !sw.claimed {
			delete(s.pods, pod.UID)
		}
		return
	}
	hadAddr := sw.addr.IsValid()
	applyStartupPod(sw, seen, pod)
	if !hadAddr && sw.addr.IsValid() {
		applyStartupSlices(sw, seen, slices())
	}
}

// sliceEvent applies a stamped EndpointSlice event to every new pod.
func (s *startups) sliceEvent(seen time.Time, slices []*discoveryv1.EndpointSlice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sw := range s.pods {
		applyStartupSlices(sw, seen, slices)
	}
}

// claim takes the earliest-created new pod not yet claimed whose creation
// was seen at or after notBefore: a trial's replacement.
func (s *startups) claim(notBefore time.Time) (types.UID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *startupWatch
	for _, sw := range s.pods {
		if sw.claimed || sw.created.Before(notBefore) {
			continue
		}
		if best == nil || sw.created.Before(best.created) || sw.created.Equal(best.created) && sw.pod < best.pod {
			best = sw
		}
	}
	if best == nil {
		return "", false
	}
	best.claimed = true
	return best.uid, true
}

// snapshot returns a copy of the new pod's record so far.
func (s *startups) snapshot(uid types.UID) (startupWatch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sw, ok := s.pods[uid]
	if !ok {
		return startupWatch{}, false
	}
	return *sw, true
}

// drop forgets a claimed pod once its stages are recorded; its later
// events (a later trial deletes it) are no new pod's.
func (s *startups) drop(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, uid)
	s.known[uid] = true
}

// startupInput is what was gathered of one trial's replacement pod;
// addStartup turns it into stages without touching the cluster.
type startupInput struct {
	watch       startupWatch
	observer    string // "" or upstream.KindNone when there is none
	appearances []upstream.Appearance
	// timeline is the new probe's record read through the pod proxy once it
	// was routed; nil if it could not be read.
	timeline *probe.Timeline
	skew     load.Estimate
	skewOK   bool
	client   load.PodStats
	clientOK bool
}

// addStartup adds the replacement pod's startup stages to rec: offsets from
// rec.T0 (negative in rollout mode, where the new pod comes before the old
// one is deleted). Pod-clock stages are corrected by the new pod's own skew
// estimate and carry its uncertainty.
func addStartup(rec *results.Record, in startupInput) {
	w := in.watch
	rec.NewPod = w.pod
	if w.addr.IsValid() {
		rec.NewPodIP = w.addr.String()
	}
	add := func(name, key string, at time.Time, unc time.Duration, clk results.Clock) {
		if at.IsZero() {
			return
		}
		rec.Stages = append(rec.Stages, results.Stage{Name: name, Key: key, At: at, OffsetNS: int64(at.Sub(rec.T0)),
			UncertaintyNS: int64(unc), Clock: clk})
	}
	add(results.StagePodCreated, "", w.created, 0, results.ClockTool)
	add(results.StagePodScheduled, "", w.scheduled, 0, results.ClockTool)
	add(results.StagePodReadyCondition, "", w.ready, 0, results.ClockTool)
	add(results.StageSliceReady, "", w.sliceReady, 0, results.ClockTool)

	// UpstreamPresent: per observer replica, the first poll listing the
	// address, tool clock; the arrival lies in [last absent poll sent,
	// first present answered]. A replica whose first reading already
	// listed it gives no arrival instant.
	if in.observer != "" && in.observer != upstream.KindNone {
		for _, a := range in.appearances {
			if !a.Bounded() {
				continue
			}
			after, notAfter := a.Bracket()
			add(results.StageUpstreamPresent, a.Key(), a.FirstPresent.At, notAfter.Sub(after), results.ClockTool)
		}
	}

	// ClientFirstRouted: the load generator's first response from the new
	// pod, tool clock; the request was routed between its send and that.
	if in.clientOK {
		add(results.StageClientFirstRouted, "", in.client.First, in.client.First.Sub(in.client.FirstSent), results.ClockTool)
	}

	// ContainerStarted / ListenerOpen / FirstRequest: the new probe's own
	// record, pod clock, corrected for skew.
	if tl := in.timeline; tl != nil && in.skewOK {
		unc := in.skew.Uncertainty
		pod := func(name string, t *time.Time) {
			if t != nil {
				add(name, "", in.skew.ToTool(*t), unc, results.ClockPod)
			}
		}
		pod(results.StageContainerStarted, &tl.Started)
		listen := tl.ListenerOpen
		if listen == nil {
			// A probe older than listener_open listened at its start.
			listen = &tl.Started
		}
		pod(results.StageListenerOpen, listen)
		pod(results.StageFirstRequest, tl.FirstTrafficRequest)
	}
	slices.SortStableFunc(rec.Stages, func(a, b results.Stage) int { return a.At.Compare(b.At) })
}

// startupSpan is when the new pod could be routed to but did not listen
// yet: from its address turning ready in the slices (no data plane routes to
// an endpoint before that: kube-proxy, ingress controllers and load
// balancer controllers all read ready endpoints from the slices; the watch
// delivers the change ~ms after they can see it) to its listener opening
// plus the skew bound. Load failures scheduled inside it are the startup
// side's. With a readiness probe on the listener the span is empty: the
// kubelet marks the pod Ready, and the EndpointSlice controller the address
// ready, only after the probe connected. ok is false when the span is empty
// or cannot be placed.
func startupSpan(rec *results.Record) (from, to time.Time, ok bool) {
	ready, okR := rec.Stage(results.StageSliceReady)
	listen, okL := rec.Stage(results.StageListenerOpen)
	if !okR || !okL {
		return time.Time{}, time.Time{}, false
	}
	from, to = ready.At, listen.At.Add(time.Duration(listen.UncertaintyNS))
	return from, to, to.After(from)
}

// splitFailures attributes to the startup side the failures scheduled
// inside the new pod's startup span: count(from, to) counts the load's
// failures by kind in [from, to). The trial's own failures were counted over
// [t0, end); what of the span falls inside that is moved out of them, so no
// failure is counted twice.
func splitFailures(rec *results.Record, t0, end time.Time, count func(from, to time.Time) map[string]int) {
	from, to, ok := startupSpan(rec)
	if !ok {
		return
	}
	startup := count(from, to)
	if len(startup) == 0 {
		return
	}
	rec.StartupFailures = startup
	lo, hi := maxTime(from, t0), minTime(to, end)
	if !hi.After(lo) {
		return
	}
	for k, n := range count(lo, hi) {
		left := rec.ClientFailures[k] - n
		if left > 0 {
			rec.ClientFailures[k] = left
		} else {
			delete(rec.ClientFailures, k)
		}
	}
	if len(rec.ClientFailures) == 0 {
		rec.ClientFailures = nil
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// armStartups starts following the probe pods created from now on: the
// replacements of the pods the trials delete. The pods there now are not.
func (r *runner) armStartups() error {
	pods, err := r.watch.pods.Pods(r.ns).List(r.podSelector())
	if err != nil {
		return fmt.Errorf("list probe pods: %w", err)
	}
	r.watch.startups.arm(pods)
	return nil
}

// claimReplacement waits for the new pod that replaces a pod deleted at t0
// (the earliest created after it; the ReplicaSet creates it as soon as the
// deletion is seen) and claims it. false when none came within
// --settle-timeout or ctx ended.
func (r *runner) claimReplacement(ctx context.Context, t0 time.Time) (types.UID, bool) {
	deadline := time.NewTimer(r.cfg.SettleTimeout)
	defer deadline.Stop()
	for {
		if uid, ok := r.watch.startups.claim(t0); ok {
			return uid, true
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-deadline.C:
			return "", false
		case <-r.watch.changed:
		case <-time.After(pollEvery):
		}
	}
}

// routed says what the new pod still lacks to be routed — Ready, ready in
// the slices, listed by every observed upstream replica, answering the load
// — or "" once it is all of these.
func (r *runner) routed(sw startupWatch) string {
	switch {
	case sw.ready.IsZero():
		return "not Ready yet"
	case sw.sliceReady.IsZero() || !sw.addr.IsValid():
		return "not ready in the EndpointSlices yet"
	}
	if obs := r.tracker.Observer().Name(); obs != upstream.KindNone {
		if ok, why := r.tracker.Steady([]netip.AddrPort{netip.AddrPortFrom(sw.addr, uint16(deploy.DefaultPort))}); !ok {
			return why
		}
	}
	if _, ok := r.gen.Pod(sw.pod); !ok {
		return "not answering the load yet"
	}
	return ""
}

// recordStartup adds the startup stages of the pod that replaced rec's to
// rec: it waits (up to --settle-timeout) until the new pod is routed, reads
// its probe's record, and attributes the load's failures during its startup
// span (see splitFailures); the trial's own failures were counted over
// [t0, end). replacement is the claimed new pod, or "" to claim the first
// one created after t0 (delete mode). What is missing when the wait ends
// early (Ctrl-C, timeout) is left out and said in rec.StartupNote.
func (r *runner) recordStartup(ctx context.Context, rec *results.Record, replacement types.UID, t0, end time.Time) {
	uid := replacement
	if uid == "" {
		var ok bool
		if uid, ok = r.claimReplacement(ctx, t0); !ok {
			rec.StartupNote = fmt.Sprintf("no replacement pod seen within --%s %s", FlagSettle, r.cfg.SettleTimeout)
			return
		}
	}
	defer r.watch.startups.drop(uid)
	deadline := time.NewTimer(r.cfg.SettleTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var sw startupWatch
	for {
		sw, _ = r.watch.startups.snapshot(uid)
		why := r.routed(sw)
		if why == "" {
			break
		}
		r.report(Progress{Phase: "trial", Trial: rec.Trial, Stage: "startup", Message: "replacement " + sw.pod + ": " + why})
		stop := ""
		select {
		case <-ctx.Done():
			stop = "the run was interrupted"
		case <-deadline.C:
			stop = fmt.Sprintf("not routed within --%s %s", FlagSettle, r.cfg.SettleTimeout)
		case <-tick.C:
		case <-r.watch.changed:
		}
		if stop != "" {
			rec.StartupNote = fmt.Sprintf("replacement %s %s: %s", sw.pod, why, stop)
			break
		}
	}
	in := startupInput{watch: sw, observer: r.tracker.Observer().Name()}
	if sw.addr.IsValid() {
		in.appearances = r.tracker.Appearances(netip.AddrPortFrom(sw.addr, uint16(deploy.DefaultPort)))
	}
	if ctx.Err() == nil && rec.StartupNote == "" {
		if tl, err := r.probes.timeline(ctx, sw.pod); err == nil {
			in.timeline = tl
		} else {
			rec.StartupNote = err.Error()
		}
	}
	in.client, in.clientOK = r.gen.Pod(sw.pod)
	in.skew, in.skewOK = r.gen.Skew(sw.pod)
	addStartup(rec, in)
	if _, to, ok := startupSpan(rec); ok {
		// The span's requests must have their outcome before they are
		// counted; a refused connect fails at once, a hung one at the
		// load timeout.
		if err := r.gen.Settle(ctx, to); err != nil {
			return
		}
	}
	splitFailures(rec, t0, end, r.gen.Failures)
}
