package measure

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
	"github.com/epwindow/epwindow/sidecar"
)

// trialInput is everything one trial gathered; buildRecord turns it into a
// record without touching the cluster.
type trialInput struct {
	trial int
	// rollout: T0 is the watch's first sight of the deletion, which the
	// Deployment controller sent, not this tool.
	rollout   bool
	pod, node string
	addr      netip.Addr
	t0, acked time.Time
	watch     trialWatch
	observer  string // "" or upstream.KindNone when there is none
	removals  []upstream.Removal
	// dns is set with --dns; dnsRemovals are the DNS servers' accounts.
	dns         bool
	dnsRemovals []upstream.Removal
	// timeline is the probe's own record, from its termination message or
	// the last read through the pod proxy (timelineSource says which).
	timeline       *probe.Timeline
	timelineSource string
	// sidecarMode is set by measure --target: sidecar is then the witness's
	// record in timeline's stead (nil when neither source could be read),
	// and hostIP the node's address, whose connections are the kubelet's
	// probes, not traffic.
	sidecarMode bool
	sidecar     *sidecar.Timeline
	hostIP      string
	// exitByKubelet is the container's terminated state, for the exit time
	// when the probe's own record lacks it.
	exitByKubelet *corev1.ContainerStateTerminated
	skew          load.Estimate
	skewOK        bool
	clientLast    load.PodStats
	clientOK      bool
	// grpc is the gRPC DNS client's side (--grpc-dns-rate; nil without).
	grpc     *grpcInput
	failures map[string]int
	maxSkew  time.Duration
	// reasons are the faults follow saw (a stall, a broken watch, the
	// hold); buildRecord adds what the data itself shows.
	reasons []results.Reason
	// runners are the in-cluster load runners, read as the trial began and
	// ended (nil without --in-cluster-load).
	runners []*runnerState
	// replacement is the new pod claimed as this trial's replacement
	// (rollout mode); "" lets the trial claim the first one created after
	// T0 (delete mode).
	replacement types.UID
}

// buildRecord assembles a trial's record. Pod-clock instants are corrected
// by the skew estimate and carry its uncertainty; a trial with missing or
// suspect data is kept with a coded reason for each fault (results.Reason),
// which invalidates only the stages it corrupts. Details name no flag: the
// results file outlives the command line.
// addStage appends a stage at instant at to rec, its offset from rec.T0.
func addStage(rec *results.Record, name, key string, at time.Time, unc time.Duration, clk results.Clock) {
	rec.Stages = append(rec.Stages, results.Stage{Name: name, Key: key, At: at, OffsetNS: int64(at.Sub(rec.T0)),
		UncertaintyNS: int64(unc), Clock: clk})
}

func buildRecord(in trialInput) *results.Record {
	rec := &results.Record{
		Kind: results.KindTrial, Trial: in.trial, Pod: in.pod, Node: in.node, PodIP: in.addr.String(),
		T0: in.t0, ClientFailures: in.failures,
	}
	reasons := slices.Clone(in.reasons)
	fault := func(code, format string, a ...any) {
		reasons = append(reasons, results.Reason{Code: code, Detail: fmt.Sprintf(format, a...)})
	}
	add := func(name, key string, at time.Time, unc time.Duration, clk results.Clock) {
		if !at.IsZero() {
			addStage(rec, name, key, at, unc, clk)
		}
	}
	if in.rollout {
		// T0 is pod_terminating_seen: the Deployment controller deleted the
		// pod; the watch saw it ~ms later.
		rec.T0Source = results.StagePodTerminatingSeen
	} else {
		// DeleteSent (T0) / DeleteAcked: the DELETE call, tool clock, µs.
		rec.T0Source = results.StageDeleteSent
		add(results.StageDeleteSent, "", in.t0, 0, results.ClockTool)
		add(results.StageDeleteAcked, "", in.acked, 0, results.ClockTool)
	}
	w := in.watch
	rec.Slice, rec.SliceWrites = w.slice, w.sliceWrites
	add(results.StagePodTerminatingSeen, "", w.terminatingSeen, 0, results.ClockTool)
	// ServerDeleteTime: metav1.Time, 1 s resolution — a cross-check only.
	add(results.StageServerDeleteTime, "", w.serverDeleteTime, time.Second, results.ClockAPIServer)
	add(results.StageSliceNotReady, "", w.sliceNotReady, 0, results.ClockTool)
	add(results.StageSliceNotServing, "", w.sliceNotServing, 0, results.ClockTool)
	add(results.StageSliceRemoved, "", w.sliceRemoved, 0, results.ClockTool)
	add(results.StagePodDeleted, "", w.podDeleted, 0, results.ClockTool)
	if w.terminatingSeen.IsZero() {
		fault(results.ReasonWatchMissed, "the pod watch never showed the pod terminating")
	}
	if w.sliceNotReady.IsZero() {
		fault(results.ReasonWatchMissed, "the EndpointSlice watch never showed the address not ready")
	}
	if w.podDeleted.IsZero() {
		fault(results.ReasonWatchMissed, "the pod watch never showed the pod deleted")
	} else if w.deletedOnRelist {
		fault(results.ReasonWatchBroken, "the pod's deletion was seen only on a relist (the watch broke): pod_deleted is not a watch delivery")
	}

	// UpstreamLastPresent / UpstreamRemoved: observer polls, tool clock; the
	// truth lies in [last present sent, removed answered].
	if in.observer != "" && in.observer != upstream.KindNone {
		if len(in.removals) == 0 {
			fault(results.ReasonObserverBlind, "the %s observer never listed %s: its removal cannot be timed", in.observer, in.addr)
		}
		addRemovals(in.removals, results.StageUpstreamLastSeen, results.StageUpstreamRemoved,
			results.ReasonObserverBlind, results.ReasonUpstreamListed, add, &reasons)
	}
	// DNSLastPresent / DNSRemoved: the DNS servers' answers, polled like an
	// observer, with the same bracket.
	if in.dns {
		if len(in.dnsRemovals) == 0 {
			fault(results.ReasonDNSBlind, "no DNS server ever answered %s for the headless name: its removal cannot be timed", in.addr)
		}
		addRemovals(in.dnsRemovals, results.StageDNSLastPresent, results.StageDNSRemoved,
			results.ReasonDNSBlind, results.ReasonDNSListed, add, &reasons)
	}

	// ClientLastRouted: the load generator's last response from this pod, tool clock, ms.
	if in.clientOK {
		add(results.StageClientLastRouted, "", in.clientLast.Last, in.clientLast.Last.Sub(in.clientLast.LastSent), results.ClockTool)
	}
	// GRPCLastRouted: the gRPC DNS client's last call the pod answered,
	// tool clock, with what ended its use of the address.
	var drainFrom time.Time
	if tl := in.timeline; tl != nil && in.skewOK {
		for _, at := range []*time.Time{tl.Released, tl.HoldExpired} {
			if at == nil {
				continue
			}
			if from := in.skew.ToTool(*at).Add(-in.skew.Uncertainty); drainFrom.IsZero() || from.Before(drainFrom) {
				drainFrom = from
			}
		}
	}
	rec.GRPC = grpcTrial(in.grpc, in.t0, drainFrom, add)

	// Pod-clock stages: the probe's record, corrected by the skew estimate.
	if !in.skewOK {
		fault(results.ReasonSkewMissing, "no clock-skew estimate for the probe on node %s: its stages cannot be put on the tool's clock", in.node)
	} else {
		rec.SkewNS, rec.SkewUncertaintyNS = int64(in.skew.Offset), int64(in.skew.Uncertainty)
		if in.maxSkew > 0 && in.skew.Uncertainty > in.maxSkew {
			fault(results.ReasonSkewBound, "clock-skew bound ±%s exceeds the %s allowed", in.skew.Uncertainty, in.maxSkew)
		}
	}
	if in.sidecarMode {
		sidecarStages(rec, in, add, fault)
		clusterStages(rec, in.runners, in.pod, in.maxSkew, drainFrom)
		slices.SortStableFunc(rec.Stages, func(a, b results.Stage) int { return a.At.Compare(b.At) })
		rec.Reasons = append(reasons, listenerCut(rec, in)...)
		rec.Valid = len(rec.Reasons) == 0
		return rec
	}
	tl := in.timeline
	if tl == nil {
		fault(results.ReasonProbeUnreadable, "the probe's record could not be read (pod proxy and termination message): %s", in.timelineSource)
	}
	if tl != nil && in.skewOK {
		unc := in.skew.Uncertainty
		pod := func(name, key string, t *time.Time) {
			if t != nil {
				add(name, key, in.skew.ToTool(*t), unc, results.ClockPod)
			}
		}
		pod(results.StagePrestopCalled, "", tl.PrestopCalled)
		pod(results.StageSigterm, "", tl.Sigterm)
		pod(results.StageLastRequest, "", tl.LastTrafficRequest)
		var latestPeer *time.Time
		for _, p := range tl.Peers {
			if p.LastTrafficAccept == nil {
				continue
			}
			pod(results.StageLastAccept, p.Addr, p.LastTrafficAccept)
			if latestPeer == nil || p.LastTrafficAccept.After(*latestPeer) {
				latestPeer = p.LastTrafficAccept
			}
		}
		// Peers trimmed away (cap or 4 KiB termination message) still count.
		if tl.LastTrafficAccept != nil && (latestPeer == nil || tl.LastTrafficAccept.After(*latestPeer)) {
			pod(results.StageLastAccept, "other", tl.LastTrafficAccept)
		}
		if tl.Sigterm == nil {
			fault(results.ReasonNoSigterm, "the probe never received SIGTERM")
		}
		// ContainerExit: the probe's own exit record, pod clock, ms.
		pod(results.StageContainerExit, "", tl.Exit)
	}
	if (tl == nil || tl.Exit == nil) && in.exitByKubelet != nil && !in.exitByKubelet.FinishedAt.IsZero() {
		// ContainerExit: kubelet-reported finishedAt, 1 s resolution.
		add(results.StageContainerExit, "", in.exitByKubelet.FinishedAt.Time, time.Second, results.ClockKubelet)
	}
	clusterStages(rec, in.runners, in.pod, in.maxSkew, drainFrom)
	slices.SortStableFunc(rec.Stages, func(a, b results.Stage) int { return a.At.Compare(b.At) })
	rec.Reasons = reasons
	rec.Valid = len(reasons) == 0
	return rec
}

// addRemovals records each replica's last-present and removed stages and,
// for a removal that cannot be trusted, a reason: blind when a poll in the
// bracket could not be read, listed when the replica still held the
// address at its last readable poll (the trial ended, at the hold, first).
func addRemovals(rms []upstream.Removal, lastPresent, removed, blind, listed string,
	add func(name, key string, at time.Time, unc time.Duration, clk results.Clock), reasons *[]results.Reason) {
	for _, rm := range rms {
		after, notAfter := rm.Bracket()
		add(lastPresent, rm.Key(), rm.LastPresent.At, rm.Resolution, results.ClockTool)
		if rm.Done() {
			add(removed, rm.Key(), rm.Removed.At, notAfter.Sub(after), results.ClockTool)
		}
		if why := rm.Invalid(); why != "" {
			code := blind
			if rm.Blind == 0 {
				code = listed
			}
			*reasons = append(*reasons, results.Reason{Code: code, Detail: why})
		}
	}
}

// sidecarStages adds the sidecar's stages (measure --target): the latest
// connection and data from each peer on the app's ports, the listener's
// close, and the app container's exit as the kubelet reports it. Peers at
// the node's address are the kubelet's probes and stay out of the window.
// A stamp is late by up to the longest gap between the sidecar's dumps
// (docs/sidecar.md), on top of the skew bound.
func sidecarStages(rec *results.Record, in trialInput, add func(name, key string, at time.Time, unc time.Duration, clk results.Clock),
	fault func(code, format string, a ...any)) {
	if term := in.exitByKubelet; term != nil && !term.FinishedAt.IsZero() {
		add(results.StageContainerExit, "", term.FinishedAt.Time, time.Second, results.ClockKubelet)
	}
	sc := in.sidecar
	if sc == nil {
		fault(results.ReasonProbeUnreadable, "the sidecar's record could not be read (pod proxy and termination message): %s", in.timelineSource)
		return
	}
	rec.Sidecar = sidecarTrial(sc, in.hostIP)
	if !in.skewOK {
		return
	}
	unc := in.skew.Uncertainty + time.Duration(max(sc.Poll.MaxGapNS, sc.Poll.IntervalNS))
	pod := func(name, key string, t *time.Time) {
		if t != nil {
			add(name, key, in.skew.ToTool(*t), unc, results.ClockPod)
		}
	}
	var lastReq *time.Time
	for _, p := range sc.Peers {
		if p.Addr == in.hostIP {
			continue
		}
		pod(results.StageLastAccept, p.Addr, p.LastAccept)
		if p.LastRequest != nil && (lastReq == nil || p.LastRequest.After(*lastReq)) {
			lastReq = p.LastRequest
		}
	}
	// Peers left out (the cap, or the 4 KiB termination message) still
	// count, through the totals, which may include the kubelet's.
	if sc.PeersOmitted > 0 || sc.PeersOverflow > 0 {
		pod(results.StageLastAccept, "other", sc.LastAccept)
		lastReq = sc.LastRequest
	}
	pod(results.StageLastRequest, "", lastReq)
	// Connections no dump saw (opened and gone between two polls: a proxy
	// that closes first leaves no TIME_WAIT here) have no peer, but the
	// poll that counted them bounds when: the window reaches it. A
	// kubelet probe is seen (the app closes first after its reply).
	pod(results.StageLastAccept, "unseen", sc.LastUnseen)
	pod(results.StageListenerClosed, "", sc.ListenerClosed)
}

// sidecarTrial is what the trial's record keeps of the sidecar's own
// account: how much it could not see.
func sidecarTrial(sc *sidecar.Timeline, hostIP string) *results.SidecarTrial {
	st := &results.SidecarTrial{Accepts: sc.Accepts, UnseenConnections: sc.UnseenConnections,
		IntervalNS: sc.Poll.IntervalNS, MaxGapNS: sc.Poll.MaxGapNS, PeersOmitted: sc.PeersOmitted, PollErrors: sc.Poll.Errors}
	for _, p := range sc.Peers {
		if p.Addr == hostIP {
			st.KubeletAccepts += p.Accepts
		}
	}
	return st
}

// listenerCut censors a trial whose app stopped listening while it was
// still routed to: before its address left every observed upstream list
// (the slice's not-ready with no observer), or with load failures after
// T0. Connections were refused from then on, so no later accept could
// show how long routing went on: the window is a floor.
func listenerCut(rec *results.Record, in trialInput) []results.Reason {
	closed, ok := rec.Stage(results.StageListenerClosed)
	if !ok {
		return nil
	}
	routed, okR := rec.StageMax(results.StageUpstreamRemoved)
	if !okR {
		routed, okR = rec.Stage(results.StageSliceNotReady)
	}
	failed := 0
	for _, n := range in.failures {
		failed += n
	}
	switch {
	case okR && routed.At.After(closed.At):
		return []results.Reason{{Code: results.ReasonListenerClosed, Detail: fmt.Sprintf(
			"the app stopped listening %s after the deletion, while its address was still routed to (%s at %s): the window is at least what was seen",
			closed.Offset().Round(time.Millisecond), routed.Name, routed.Offset().Round(time.Millisecond))}}
	case failed > 0:
		return []results.Reason{{Code: results.ReasonListenerClosed, Detail: fmt.Sprintf(
			"the app stopped listening %s after the deletion and %d requests failed: the window is at least what was seen",
			closed.Offset().Round(time.Millisecond), failed)}}
	}
	return nil
}
