package results

import (
	"strings"
)

// Reason is one fault of a trial: a stable code that reports group by, and
// the detail of this occurrence (times, bounds, names).
type Reason struct {
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
}

// String renders a reason as "code: detail".
func (r Reason) String() string {
	if r.Detail == "" {
		return r.Code
	}
	return r.Code + ": " + r.Detail
}

// Reason codes. Each invalidates the stages of one clock or source (see
// ReasonStages); a code this version does not know invalidates every stage.
const (
	// ReasonWatchBroken: a pod or EndpointSlice watch broke inside the
	// trial, or the deletion was seen only on a relist.
	ReasonWatchBroken = "watch_broken"
	// ReasonAPIServerStall: the API server did not answer for a while
	// inside the trial; watch deliveries may be late by as much.
	ReasonAPIServerStall = "apiserver_stall"
	// ReasonWatchMissed: a watch never showed a stage it should have
	// (terminating, not ready, deleted).
	ReasonWatchMissed = "watch_missed"
	// ReasonRemovalTimeout: the pod or its endpoint was still there long
	// after the grace period.
	ReasonRemovalTimeout = "removal_timeout"
	// ReasonObserverBlind: an observed controller replica could not be read
	// when the removal happened, or never listed the address.
	ReasonObserverBlind = "observer_blind"
	// ReasonUpstreamListed: a controller replica still listed the address
	// when the trial ended (it ran into the hold): its removal is unknown.
	ReasonUpstreamListed = "upstream_listed"
	// ReasonDNSBlind: a DNS server asked for the headless name did not
	// answer when the removal happened, or never answered the address.
	ReasonDNSBlind = "dns_blind"
	// ReasonDNSListed: a DNS server still answered the address when the
	// trial ended: its removal from DNS is unknown.
	ReasonDNSListed = "dns_listed"
	// ReasonSkewBound: the probe clock's offset is known less precisely
	// than the run allows.
	ReasonSkewBound = "skew_bound"
	// ReasonSkewMissing: no clock-skew estimate for the probe at all.
	ReasonSkewMissing = "skew_missing"
	// ReasonProbeUnreadable: the probe's own record could be read neither
	// through the pod proxy nor from its termination message.
	ReasonProbeUnreadable = "probe_unreadable"
	// ReasonNoSigterm: the probe never received SIGTERM.
	ReasonNoSigterm = "no_sigterm"
	// ReasonHoldReached: traffic or an upstream listing went on until the
	// hold ended the trial. The trial is censored: its traffic end is a
	// floor, and it stays in n and in every quantile.
	ReasonHoldReached = "hold_reached"
	// ReasonListenerClosed: the app stopped listening (measure --target's
	// sidecar saw its listener close) before its address left every
	// observed upstream list: connections were refused from then on, so the
	// traffic end is only a floor — the trial is censored as at the hold,
	// and the load's failures after it are the finding.
	ReasonListenerClosed = "listener_closed"
	// ReasonStreamsLogFull: a stream holder's event log (the tool's or an
	// in-cluster runner's, load.DefaultMaxStreamEvents) was full before
	// the trial's stream observation ended, so its closes and re-opens
	// are incomplete: the trial's stream record of that holder is left
	// out; no stage is affected.
	ReasonStreamsLogFull = "streams_log_full"
	// ReasonUnspecified: a version-1 reason this version cannot classify,
	// or an invalid trial without one. Every stage is invalid.
	ReasonUnspecified = "unspecified"
)

// stageGroup is a set of stages one kind of fault corrupts together.
type stageGroup struct {
	name   string
	stages []string
}

// The stage groups a reason can invalidate.
var (
	// watchGroup is stamped from the pod and EndpointSlice watches.
	watchGroup = &stageGroup{"watch stages", []string{StagePodTerminatingSeen, StageServerDeleteTime,
		StageSliceNotReady, StageSliceNotServing, StageSliceRemoved, StagePodDeleted}}
	// upstreamGroup comes from the upstream observer.
	upstreamGroup = &stageGroup{"upstream stages", []string{StageUpstreamLastSeen, StageUpstreamRemoved}}
	// dnsGroup comes from the DNS observer.
	dnsGroup = &stageGroup{"DNS stages", []string{StageDNSLastPresent, StageDNSRemoved}}
	// podClockGroup is the probe's record, put on the tool's clock with the
	// skew estimate; the window and the recommendation rest on it.
	podClockGroup = &stageGroup{"probe-clock stages and the window", []string{StagePrestopCalled, StageSigterm,
		StageLastAccept, StageLastRequest, StageListenerClosed, StageContainerExit, PointWindow}}
	// censoredPoints end with the traffic: a trial cut at the hold knows
	// only a floor of them.
	censoredPoints = []string{StageLastAccept, StageLastRequest, StageClientLastRouted, StageClusterLastRouted, StageGRPCLastRouted, PointWindow}
)

// reasonGroups maps each code to the stages it invalidates (nil: none).
var reasonGroups = map[string]*stageGroup{
	ReasonWatchBroken:     watchGroup,
	ReasonAPIServerStall:  watchGroup,
	ReasonWatchMissed:     watchGroup,
	ReasonRemovalTimeout:  watchGroup,
	ReasonObserverBlind:   upstreamGroup,
	ReasonUpstreamListed:  upstreamGroup,
	ReasonDNSBlind:        dnsGroup,
	ReasonDNSListed:       dnsGroup,
	ReasonSkewBound:       podClockGroup,
	ReasonSkewMissing:     podClockGroup,
	ReasonProbeUnreadable: podClockGroup,
	ReasonNoSigterm:       podClockGroup,
	ReasonHoldReached:     nil, // censors the traffic end; invalidates nothing
	ReasonListenerClosed:  nil, // censors the traffic end, as the hold does
	ReasonStreamsLogFull:  nil, // leaves out the stream record; no stage
}

// ReasonStages lists the stages a reason code invalidates; all is set for a
// code that invalidates every stage (ReasonUnspecified, or one this version
// does not know).
func ReasonStages(code string) (stages []string, all bool) {
	g, known := reasonGroups[code]
	if g == nil {
		return nil, !known
	}
	return g.stages, false
}

// reasonEffect says in words what a reason code does to the trial's stages.
func reasonEffect(code string) string {
	g, known := reasonGroups[code]
	switch {
	case !known:
		return "every stage left out"
	case code == ReasonHoldReached, code == ReasonListenerClosed:
		return "censored"
	case code == ReasonStreamsLogFull:
		return "stream record left out"
	case g == nil:
		return ""
	}
	return g.name + " left out"
}

// ReasonList is the trial's reasons: Reasons as written by version 2, or
// for a version-1 record its invalid_reason split and classified.
func (r *Record) ReasonList() []Reason {
	if len(r.Reasons) > 0 || r.Valid {
		return r.Reasons
	}
	var out []Reason
	for _, text := range splitLegacy(r.Invalid) {
		out = append(out, Reason{Code: classifyLegacy(text), Detail: text})
	}
	if len(out) == 0 {
		out = []Reason{{Code: ReasonUnspecified}}
	}
	return out
}

// Censored reports whether the trial ran into the hold, or the app stopped
// listening while still routed to: its traffic end is only a floor.
func (r *Record) Censored() bool {
	for _, rs := range r.ReasonList() {
		if rs.Code == ReasonHoldReached || rs.Code == ReasonListenerClosed {
			return true
		}
	}
	return false
}

// PointValid reports whether no reason of the trial invalidates point (a
// stage or PointWindow). delete_sent, delete_acked and client_last_routed
// are the tool's own stamps and fall only with an unclassified reason.
func (r *Record) PointValid(point string) bool {
	for _, rs := range r.ReasonList() {
		stages, all := ReasonStages(rs.Code)
		if all {
			return false
		}
		for _, s := range stages {
			if s == point {
				return false
			}
		}
	}
	return true
}

// dnsListedOnly reports whether the trial's DNS stages are invalid only
// because a server still answered the address when the trial ended (and
// none was blind): its dns_removed is then at least its last answer.
func (r *Record) dnsListedOnly() bool {
	listed := false
	for _, rs := range r.ReasonList() {
		switch rs.Code {
		case ReasonDNSListed:
			listed = true
		case ReasonDNSBlind:
			return false
		}
	}
	return listed
}

// censorable reports whether point ends with the traffic, so that a
// censored trial knows only its floor.
func censorable(point string) bool {
	for _, p := range censoredPoints {
		if p == point {
			return true
		}
	}
	return false
}

// InvalidReason renders the trial's reasons as "code: detail; …", "" for a
// valid trial.
func (r *Record) InvalidReason() string {
	var parts []string
	for _, rs := range r.ReasonList() {
		parts = append(parts, rs.String())
	}
	return strings.Join(parts, "; ")
}

// splitLegacy splits a version-1 invalid_reason that lists several
// reasons ("a; b").
func splitLegacy(reason string) []string {
	var out []string
	for _, r := range strings.Split(reason, "; ") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// legacyPatterns classify the free-text reasons version-1 writers produced
// (measure's buildRecord, the observer's Removal.Invalid), first match wins.
var legacyPatterns = []struct{ substr, code string }{
	{"went on past --hold", ReasonHoldReached},
	{"the API server did not answer", ReasonAPIServerStall},
	{"watch broke", ReasonWatchBroken},
	{"seen only on a relist", ReasonWatchBroken},
	{"watch never showed", ReasonWatchMissed},
	{"was not removed within", ReasonRemovalTimeout},
	{"still listed the address", ReasonUpstreamListed},
	{"observer never listed", ReasonObserverBlind},
	{"unreadable", ReasonObserverBlind},
	{"no clock-skew estimate", ReasonSkewMissing},
	{"skew bound", ReasonSkewBound},
	{"clock-skew bound", ReasonSkewBound},
	{"record could not be read", ReasonProbeUnreadable},
	{"probe unreachable", ReasonProbeUnreadable},
	{"never received SIGTERM", ReasonNoSigterm},
}

func classifyLegacy(text string) string {
	for _, p := range legacyPatterns {
		if strings.Contains(text, p.substr) {
			return p.code
		}
	}
	return ReasonUnspecified
}
