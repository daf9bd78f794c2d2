package results

import (
	"time"
)

// PointWindow names the end of the propagation window: the last traffic
// that reached the probe, max(last_accept over peers, last_request). Its
// offset from T0 is the window (DESIGN.md "The window").
const PointWindow = "window"

// keyedStages are the stages recorded once per key; a lookup by name
// without a key answers their latest instance, the one that ends the stage
// for every key (the last controller replica to drop the address, the last
// peer to open a connection).
var keyedStages = map[string]bool{
	StageUpstreamLastSeen:  true,
	StageUpstreamRemoved:   true,
	StageDNSLastPresent:    true,
	StageDNSRemoved:        true,
	StageLastAccept:        true,
	StageUpstreamPresent:   true,
	StageClusterLastRouted: true,
	// The tool's gRPC client records it unkeyed, each in-cluster runner's
	// under its runner key.
	StageGRPCLastRouted: true,
}

// Keyed reports whether a stage is recorded per key.
func Keyed(name string) bool { return keyedStages[name] }

// offset is the stage's offset from T0. OffsetNS is authoritative; a writer
// that left it zero while At and T0 differ gets it computed from At.
func (r *Record) offset(s Stage) time.Duration {
	if s.OffsetNS == 0 && !s.At.IsZero() && !r.T0.IsZero() && !s.At.Equal(r.T0) {
		return s.At.Sub(r.T0)
	}
	return s.Offset()
}

// Stage returns the first instance of the named stage.
func (r *Record) Stage(name string) (Stage, bool) {
	for _, s := range r.Stages {
		if s.Name == name {
			return s, true
		}
	}
	return Stage{}, false
}

// StageKey returns the instance of a keyed stage for one key.
func (r *Record) StageKey(name, key string) (Stage, bool) {
	for _, s := range r.Stages {
		if s.Name == name && s.Key == key {
			return s, true
		}
	}
	return Stage{}, false
}

// Instances returns every instance of the named stage, in record order.
func (r *Record) Instances(name string) []Stage {
	var out []Stage
	for _, s := range r.Stages {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// StageMax returns the instance of the named stage with the latest offset.
func (r *Record) StageMax(name string) (Stage, bool) {
	var best Stage
	found := false
	for _, s := range r.Stages {
		if s.Name != name {
			continue
		}
		if !found || r.offset(s) > r.offset(best) {
			best, found = s, true
		}
	}
	return best, found
}

// Offset is the named stage's offset from T0: the latest instance for keyed
// stages, the first otherwise. delete_sent is T0 itself.
func (r *Record) Offset(name string) (time.Duration, bool) {
	if name == StageDeleteSent {
		return 0, true
	}
	if name == PointWindow {
		return r.Window()
	}
	var s Stage
	var ok bool
	if Keyed(name) {
		s, ok = r.StageMax(name)
	} else {
		s, ok = r.Stage(name)
	}
	if !ok {
		return 0, false
	}
	return r.offset(s), true
}

// TrafficEnd is the offset of the last traffic that reached the probe:
// max(last_accept over peers, last_request).
func (r *Record) TrafficEnd() (time.Duration, bool) {
	a, okA := r.Offset(StageLastAccept)
	q, okQ := r.Offset(StageLastRequest)
	switch {
	case okA && okQ:
		return max(a, q), true
	case okA:
		return a, true
	case okQ:
		return q, true
	}
	return 0, false
}

// Window is max(last_accept over peers, last_request) − T0: how long after
// the deletion new traffic still reached the pod, through any path. The
// probe records accepts per peer, and in-cluster runners are peers of their
// own (no SNAT on the ClusterIP path), so the window covers the ClusterIP
// path as well as the ingress; cluster_last_routed is the runners' view of
// the same instant, on other clocks, and stays out of it so that the cover
// (window − prestop_called) remains a difference on one clock.
func (r *Record) Window() (time.Duration, bool) { return r.TrafficEnd() }

// MeasuredWindow reports whether the trial measured the window: it has one
// and nothing made it invalid. The drift test pools only such trials.
func (r *Record) MeasuredWindow() bool {
	_, ok := r.Window()
	return ok && r.PointValid(PointWindow)
}

// AfterPrestop is the traffic end − prestop_called: what a preStop hook has
// to cover. False when either is missing.
func (r *Record) AfterPrestop() (time.Duration, bool) {
	return r.between(StagePrestopCalled, PointWindow)
}

// AfterSigterm is the traffic end − sigterm: what an app without a preStop
// hook has to keep serving after SIGTERM.
func (r *Record) AfterSigterm() (time.Duration, bool) {
	return r.between(StageSigterm, PointWindow)
}

// AfterTermination is what the app must cover after its termination begins:
// AfterPrestop when the kubelet called a preStop hook, else AfterSigterm.
// from names the stage used.
func (r *Record) AfterTermination() (d time.Duration, from string, ok bool) {
	if d, ok := r.AfterPrestop(); ok {
		return d, StagePrestopCalled, true
	}
	if d, ok := r.AfterSigterm(); ok {
		return d, StageSigterm, true
	}
	// The sidecar (measure --target) sees neither the app's preStop call
	// nor its SIGTERM: the covered duration runs from the deletion, which
	// the kubelet's preStop follows, so covering it is conservative.
	if r.Sidecar != nil {
		if w, ok := r.Window(); ok {
			return w, StageDeleteSent, true
		}
	}
	return 0, "", false
}

// Between is the duration from one named point (stage or PointWindow) to
// another.
func (r *Record) Between(from, to string) (time.Duration, bool) {
	return r.between(from, to)
}

func (r *Record) between(from, to string) (time.Duration, bool) {
	a, okA := r.Offset(from)
	b, okB := r.Offset(to)
	if !okA || !okB {
		return 0, false
	}
	return b - a, true
}

// MaxUncertainty is the largest UncertaintyNS among the named stage's
// instances (0 when absent).
func (r *Record) MaxUncertainty(name string) time.Duration {
	var u int64
	for _, s := range r.Stages {
		if s.Name == name {
			u = max(u, s.UncertaintyNS)
		}
	}
	return time.Duration(u)
}

// LongestWindow is the longest window of every trial whose window is valid
// (Record.PointValid(PointWindow)), a trial cut at the hold included at
// its seen value: its true window is at least that, so leaving it out
// would only shorten the longest. censored reports whether the longest is
// such a floor; ok is false when no trial has a valid window. verify
// --window-from reads it.
func LongestWindow(trials []Record) (longest time.Duration, censored, ok bool) {
	for i := range trials {
		r := &trials[i]
		if !r.PointValid(PointWindow) {
			continue
		}
		w, has := r.Window()
		if !has {
			continue
		}
		if !ok || w > longest || (w == longest && r.Censored()) {
			longest, censored, ok = w, r.Censored(), true
		}
	}
	return longest, censored, ok
}
