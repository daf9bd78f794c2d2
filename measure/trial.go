package measure

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

// pollEvery is how often a trial re-checks its release condition and keeps
// a fresh copy of the probe's timeline.
const pollEvery = 200 * time.Millisecond

// timelineEvery is how often a terminating probe's timeline is read through
// the pod proxy: the fallback if the termination message never arrives.
const timelineEvery = time.Second

// pickPod chooses the trial's victim: the oldest ready pod, as a rolling
// update would, with the name breaking ties so the choice is reproducible.
// With stream holders (held: each holder's open streams by pod), the oldest
// among the pods holding a stream of every holder: streams never rebalance,
// so a holder that opened its streams before a pod was Ready (an in-cluster
// runner starts with the probe pods) may hold none on the oldest, and a
// trial of that pod would follow none of that holder's streams. Which pod
// holds the streams says nothing of how fast its address is withdrawn, so
// the choice does not bias the window. When no pod holds a stream of every
// holder, the oldest of all: the trial then records what it saw.
func pickPod(pods []*corev1.Pod, held ...map[string]int) *corev1.Pod {
	if len(pods) == 0 {
		return nil
	}
	holding := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool {
		for _, h := range held {
			if h[p.Name] == 0 {
				return true
			}
		}
		return false
	})
	if len(holding) > 0 {
		pods = holding
	}
	return slices.MinFunc(pods, func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
}

// streamsHeld is each stream holder's open streams by pod as a trial
// begins: the tool's own and each runner's (read in runners), nil without
// streams.
func (r *runner) streamsHeld(runners []*runnerState) []map[string]int {
	if r.cfg.Streams.N == 0 {
		return nil
	}
	var held []map[string]int
	if r.streams != nil {
		ev, _ := r.streams.Events()
		held = append(held, load.OpenByPod(ev))
	}
	for _, st := range runners {
		if st.statsOK {
			held = append(held, load.OpenByPod(st.stats.Streams))
		}
	}
	return held
}

// trial deletes one pod and records every stage of its removal.
func (r *runner) trial(ctx context.Context, i int) (*results.Record, error) {
	cfg := r.cfg
	pods, err := r.steadyPods()
	if err != nil {
		return nil, err
	}
	// The runners are read before the choice: their streams decide it.
	runners := r.startRunners(ctx)
	pod := pickPod(pods, r.streamsHeld(runners)...)
	if pod == nil {
		return nil, fmt.Errorf("trial %d: no ready probe pod to delete", i)
	}
	addr, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return nil, fmt.Errorf("trial %d: pod %s address %q: %w", i, pod.Name, pod.Status.PodIP, err)
	}
	in := r.newInput(ctx, i, pod, addr, runners)
	r.report(Progress{Phase: "trial", Trial: i, Stage: "delete", Message: "deleting " + pod.Name})

	r.watch.begin(pod, addr)
	grace := int64(r.grace() / time.Second)
	uid := pod.UID
	in.t0 = cfg.Clock.Now() // T0: stamped just before DELETE is sent, tool clock.
	err = r.deleter.CoreV1().Pods(r.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	in.acked = cfg.Clock.Now()
	if err != nil {
		r.watch.end(uid)
		return nil, fmt.Errorf("trial %d: delete pod %s/%s (needs delete pods): %w", i, r.ns, pod.Name, err)
	}
	return r.follow(ctx, in, uid)
}

// newInput starts a trial's input for pod. A pod that served no load has no
// skew estimate from responses; its /clock is read through the pod proxy
// while it still runs.
func (r *runner) newInput(ctx context.Context, i int, pod *corev1.Pod, addr netip.Addr, runners []*runnerState) trialInput {
	in := trialInput{trial: i, pod: pod.Name, node: pod.Spec.NodeName, addr: addr, observer: r.tracker.Observer().Name(),
		maxSkew: r.cfg.MaxSkewUncertainty, runners: runners}
	// The app's replies (--target) carry no clock: its sidecar's /clock.
	if r.target != nil || !r.genHasSkew(pod.Name) {
		if est, err := load.ClockSample(ctx, r.cfg.Clock, func(ctx context.Context) (time.Time, error) {
			return r.probes.probeClock(ctx, pod.Name)
		}, 5); err == nil {
			in.skew, in.skewOK = est, true
		}
	}
	return in
}

// nodeSkew estimates a probe pod's clock offset per node (DESIGN.md "Clock
// skew"): the pods on one node read one clock, so the tightest sample among
// the load's responses from any probe pod on pod's node wins, pod's own
// included. ok is false when none of them has a sample.
func (r *runner) nodeSkew(pod, node string) (load.Estimate, bool) {
	var ests []load.Estimate
	if e, ok := r.gen.Skew(pod); ok {
		ests = append(ests, e)
	}
	if node != "" {
		if pods, err := r.watch.pods.Pods(r.ns).List(r.podSelector()); err == nil {
			for _, p := range pods {
				if p.Name == pod || p.Spec.NodeName != node {
					continue
				}
				if e, ok := r.gen.Skew(p.Name); ok {
					ests = append(ests, e)
				}
			}
		}
	}
	return load.Best(ests...)
}

// follow records a deleted pod's removal from in.t0 on: it holds the probe
// until its address left every observed upstream list and no traffic
// reached it for the quiet period (or the hold ran out), reads the probe's
// record, releases it, and waits for the pod object and its endpoint to go.
func (r *runner) follow(ctx context.Context, in trialInput, uid types.UID) (*results.Record, error) {
	cfg := r.cfg
	i := in.trial
	addrPort := netip.AddrPortFrom(in.addr, uint16(deploy.DefaultPort))
	var lastRead time.Time
	var tl *probe.Timeline
	var tlErr error
	holdEnd := in.t0.Add(cfg.PreStopSleep + cfg.Hold)
	drainEnd := in.t0.Add(cfg.PreStopSleep + streamDrainSpread(cfg.Streams))
	tick := cfg.Clock.NewTicker(pollEvery)
	defer tick.Stop()
	hitHold := false
	for {
		now := cfg.Clock.Now()
		if now.Sub(lastRead) >= timelineEvery {
			if t, err := r.probes.timeline(ctx, in.pod); err == nil {
				tl = t
			} else {
				tlErr = err
			}
			for _, st := range in.runners {
				r.readRunner(ctx, st, 0)
			}
			lastRead = now
		}
		stage, quietSince, removed := r.releaseState(in, uid, addrPort)
		// The probe is held until the ClusterIP path is quiet too.
		quietSince = maxTime(quietSince, runnersLast(in.runners, in.pod))
		r.report(Progress{Phase: "trial", Trial: i, Stage: stage})
		if removed && now.Sub(quietSince) >= cfg.QuietPeriod && !now.Before(drainEnd) {
			break
		}
		if now.After(holdEnd) {
			hitHold = true
			break
		}
		select {
		case <-ctx.Done():
			r.watch.end(uid)
			return nil, context.Cause(ctx)
		case <-tick.C():
		}
	}
	if hitHold {
		// Censored, not dropped: the window is at least what was seen.
		in.reasons = append(in.reasons, results.Reason{Code: results.ReasonHoldReached,
			Detail: fmt.Sprintf("traffic or an upstream listing went on until the hold (%s) ended the trial: the window is at least what was seen", cfg.PreStopSleep+cfg.Hold)})
	}
	if t, err := r.probes.timeline(ctx, in.pod); err == nil {
		tl = t
	} else {
		tlErr = err
	}
	if err := r.probes.release(ctx, in.pod); err != nil && !hitHold {
		// The probe will still exit at --hold; the record may then come only
		// from its termination message.
		tlErr = err
	}
	r.report(Progress{Phase: "trial", Trial: i, Stage: "released"})

	// Wait for the pod object to go and the address to leave every slice.
	deadline := cfg.Clock.NewTimer(r.grace() + 30*time.Second)
	defer deadline.Stop()
wait:
	for {
		s := r.watch.snapshot(uid)
		// With --dns, until DNS stopped answering the address too: with
		// publishNotReadyAddresses that is only once the pod is gone.
		dnsGone := true
		if r.dnsTracker != nil {
			dnsGone, _ = r.dnsTracker.Gone(addrPort)
		}
		if !s.podDeleted.IsZero() && !s.sliceRemoved.IsZero() && dnsGone {
			break
		}
		select {
		case <-ctx.Done():
			r.watch.end(uid)
			return nil, context.Cause(ctx)
		case <-deadline.C():
			in.reasons = append(in.reasons, removalTimeout(r.grace()))
			break wait
		case <-r.watch.changed:
		case <-tick.C():
		}
	}
	end := cfg.Clock.Now()
	in.watch = r.watch.end(uid)
	in.removals = r.tracker.Removals(addrPort)
	r.tracker.Forget(addrPort)
	if r.dnsTracker != nil {
		in.dns = true
		in.dnsRemovals = r.dnsTracker.Removals(addrPort)
		r.dnsTracker.Forget(addrPort)
	}
	if termTL, term := terminationTimeline(in.watch.lastPod, probeContainer); termTL != nil {
		in.timeline, in.timelineSource = termTL, "termination message"
		in.exitByKubelet = term
	} else {
		in.exitByKubelet = term
		in.timeline, in.timelineSource = tl, "pod proxy"
		if tl == nil && tlErr != nil {
			in.timelineSource = tlErr.Error()
		}
	}
	if ps, ok := r.gen.Pod(in.pod); ok {
		in.clientLast, in.clientOK = ps, true
	}
	// Streams that ended with the pod (none, goaway) re-open after it is
	// gone: the herd is observed until they are back (awaitReopens),
	// before the runners are read.
	streamsEnd := r.awaitReopens(ctx, end)
	// The runners' last word on the pod, and a fresh look at their clocks.
	for _, st := range in.runners {
		r.readRunner(ctx, st, runnerClockSamples)
	}
	if est, ok := r.nodeSkew(in.pod, in.node); ok {
		if in.skewOK {
			est, _ = load.Best(est, in.skew) // with the /clock sample of newInput
		}
		in.skew, in.skewOK = est, true
	}
	// Requests to the vanished address may still hang (no route to host
	// takes seconds); their failures count once they have an outcome.
	if err := r.gen.Settle(ctx, end); err != nil {
		return nil, err
	}
	in.failures = r.gen.Failures(in.t0, end)
	grpcIn, err := r.readGRPC(ctx, in.pod, in.t0, end)
	if err != nil {
		return nil, err
	}
	in.grpc = grpcIn
	r.trialFaults(&in, end)
	rec := buildRecord(in)
	streams := streamLog(in.timeline, tl)
	rec.Streams = r.streamRecord(rec, streams, streamsEnd)
	rec.ClusterStreams = r.clusterStreamRecord(rec, streams, in.runners, streamsEnd)
	r.leaveOutFullLogs(rec, in.runners, streamsEnd)
	r.recordStartup(ctx, rec, in.replacement, in.t0, end)
	if cfg.StopOnBlindObserver {
		for _, rm := range in.removals {
			if rm.Blind > 0 {
				return rec, fmt.Errorf("trial %d: the %s observer could not read %s (%v); stopping as --%s asks",
					i, in.observer, rm.Key(), rm.LastErr, FlagStopOnBlind)
			}
		}
	}
	return rec, nil
}

// removalTimeout is the reason of a trial whose pod or endpoint outlived
// the pod's grace period by 30 s.
func removalTimeout(grace time.Duration) results.Reason {
	return results.Reason{Code: results.ReasonRemovalTimeout,
		Detail: fmt.Sprintf("the pod or its endpoint was not removed within the grace period + 30s (%s)", grace+30*time.Second)}
}

// genHasSkew reports whether the load has a skew estimate for pod from its
// replies.
func (r *runner) genHasSkew(pod string) bool {
	if r.gen == nil {
		return false
	}
	_, ok := r.gen.Skew(pod)
	return ok
}

// trialFaults adds the faults of the run's background work between the
// trial's T0 and end: an API server stall, a broken watch.
func (r *runner) trialFaults(in *trialInput, end time.Time) {
	if st, ok := r.heartbeat.stalledBetween(in.t0, end); ok {
		in.reasons = append(in.reasons, results.Reason{Code: results.ReasonAPIServerStall,
			Detail: fmt.Sprintf("the API server did not answer from %s for %s: watch-stamped stages may be late by as much",
				st.from.Format(time.RFC3339Nano), st.to.Sub(st.from).Round(time.Millisecond))})
	}
	if e, ok := r.watch.watchErrorBetween(in.t0, end); ok {
		in.reasons = append(in.reasons, results.Reason{Code: results.ReasonWatchBroken,
			Detail: fmt.Sprintf("the %s watch broke at %s: %s", e.resource, e.at.Format(time.RFC3339Nano), e.err)})
	}
}

// releaseState tells the trial's latest stage, since when no traffic reached
// the pod (the later of its last response and its removal), and whether the
// address is gone from every observed upstream list (the slices' not-ready
// state when nothing is observed).
func (r *runner) releaseState(in trialInput, uid types.UID, addr netip.AddrPort) (stage string, quietSince time.Time, removed bool) {
	s := r.watch.snapshot(uid)
	stage = "deleting"
	if !s.terminatingSeen.IsZero() {
		stage = results.StagePodTerminatingSeen
	}
	if !s.sliceNotReady.IsZero() {
		stage, quietSince = results.StageSliceNotReady, s.sliceNotReady
	}
	if in.observer == "" || in.observer == upstream.KindNone {
		removed = !s.sliceNotReady.IsZero()
	} else if gone, _ := r.tracker.Gone(addr); gone {
		stage, removed = results.StageUpstreamRemoved, true
		quietSince = latestRemoval(r.tracker, addr, quietSince)
	}
	// With --dns the probe is held until DNS stopped answering its address
	// too: DNS clients may route to it until then.
	if r.dnsTracker != nil && removed {
		if gone, _ := r.dnsTracker.Gone(addr); !gone {
			removed = false
		} else {
			quietSince = latestRemoval(r.dnsTracker, addr, quietSince)
		}
	}
	if r.gen == nil {
		return stage, quietSince, removed
	}
	if ps, ok := r.gen.Pod(in.pod); ok && ps.Last.After(quietSince) {
		quietSince = ps.Last
	}
	return stage, quietSince, removed
}

// latestRemoval is the later of since and the last of tr's replicas to
// drop addr.
func latestRemoval(tr *upstream.Tracker, addr netip.AddrPort, since time.Time) time.Time {
	for _, rm := range tr.Removals(addr) {
		if rm.Removed.At.After(since) {
			since = rm.Removed.At
		}
	}
	return since
}
