package verify

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Sides a failure is attributed to.
const (
	// SideShutdown: the failure followed a pod deletion, or a terminating
	// pod had stopped answering on its port while it could still be routed to.
	SideShutdown = "shutdown"
	// SideStartup: the failure followed a pod becoming Ready, or a Ready pod
	// did not answer on its port yet.
	SideStartup = "startup"
	// SideUnknown: no pod event of the rollout precedes the failure.
	SideUnknown = "unknown"
)

// Bases of an attribution.
const (
	// BasisListener: decided by the pods' own ports, read through the API
	// server's pod proxy (--check-port).
	BasisListener = "listener"
	// BasisTiming: decided by the latest pod deletion or Ready before the
	// failure (no --check-port, or no listener state covers the instant).
	BasisTiming = "timing"
)

// Report is what one verify run found. Durations are integer nanoseconds
// (_ns), instants RFC 3339 with nanoseconds.
type Report struct {
	Namespace   string  `json:"namespace"`
	Deployment  string  `json:"deployment"`
	URL         string  `json:"url"`
	Host        string  `json:"host,omitempty"`
	Method      string  `json:"method"`
	Rate        float64 `json:"rate"`
	Replicas    int     `json:"replicas"`
	MaxFailures int     `json:"max_failures"`
	// AllowExitCodes are the non-zero exits that do not fail the gate.
	AllowExitCodes []int32 `json:"allow_exit_codes,omitempty"`
	// RouteCheck says how the route of --host/--path was checked to lead
	// to the Deployment's pods, or that it was not: --route-check=false, or
	// (with an error naming the permission) routes elsewhere unreadable.
	RouteCheck string `json:"route_check,omitempty"`
	// Requested is --rollouts: how many rollouts the run was to see.
	Requested int `json:"rollouts_requested"`
	// Watch is true when the rollouts were started elsewhere (--watch).
	Watch bool `json:"watch,omitempty"`
	// Sidecar is true when each replaced pod's window was read from its
	// epwindow sidecar (--sidecar): information beside the failures, not
	// part of the verdict.
	Sidecar  bool      `json:"sidecar,omitempty"`
	SelfTest *SelfTest `json:"self_test,omitempty"`
	Shape    *Shape    `json:"shape,omitempty"`
	// Baseline is the load before the first rollout: it must be clean, or
	// the failures during the rollouts prove nothing about them.
	Baseline *Outcomes `json:"baseline,omitempty"`
	Rollouts []Rollout `json:"rollouts"`
	// Interrupted is set when Ctrl-C stopped the run; Note says what was
	// left to the Deployment controller.
	Interrupted bool     `json:"interrupted,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	Verdict     Verdict  `json:"verdict"`
}

// Outcomes counts responses by outcome: OK is 2xx; Failed maps each failure
// kind (refused, reset, timeout, eof, status_502, ...) to its count.
// Dropped requests were never sent (the load generator's in-flight cap):
// not the cluster's failures, but gaps in the test.
type Outcomes struct {
	OK      int64          `json:"ok"`
	Failed  map[string]int `json:"failed,omitempty"`
	Dropped int            `json:"dropped,omitempty"`
}

// Failures is the number of failed requests.
func (o Outcomes) Failures() int {
	n := 0
	for _, c := range o.Failed {
		n += c
	}
	return n
}

// Kinds lists the failure kinds, most frequent first.
func (o Outcomes) Kinds() []string {
	var ks []string
	for k := range o.Failed {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if o.Failed[ks[i]] != o.Failed[ks[j]] {
			return o.Failed[ks[i]] > o.Failed[ks[j]]
		}
		return ks[i] < ks[j]
	})
	return ks
}

// String reads "1200 ok, 14 failed (9 refused, 5 status_502)".
func (o Outcomes) String() string {
	s := fmt.Sprintf("%d ok, %d failed", o.OK, o.Failures())
	if n := o.Failures(); n > 0 {
		var parts []string
		for _, k := range o.Kinds() {
			parts = append(parts, fmt.Sprintf("%d %s", o.Failed[k], k))
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if o.Dropped > 0 {
		s += fmt.Sprintf(", %d not sent (load generator at its in-flight cap)", o.Dropped)
	}
	return s
}

// Rollout is one rollout under load.
type Rollout struct {
	N int `json:"n"`
	// Started is when verify sent the restart, or (--watch) when it saw the
	// Deployment's new generation; tool clock.
	Started time.Time `json:"started"`
	// DurationNS runs from Started to the Deployment's rollout being
	// complete (kubectl rollout status); DrainedNS to the last replaced pod
	// being gone.
	DurationNS int64 `json:"duration_ns"`
	DrainedNS  int64 `json:"drained_ns,omitempty"`
	Complete   bool  `json:"complete"`
	// Condition is the Deployment's Progressing condition when the rollout
	// did not complete.
	Condition string    `json:"condition,omitempty"`
	Outcomes  Outcomes  `json:"outcomes"`
	Failures  []Failure `json:"failures,omitempty"`
	Exits     []PodExit `json:"exits,omitempty"`
	// Ports is the mechanism check (--check-port), one per replaced pod.
	Ports []PortCheck `json:"ports,omitempty"`
	// Windows are the replaced pods' windows as their sidecars measured
	// them (--sidecar), one per replaced pod, unreadable ones too.
	Windows []PodWindow `json:"windows,omitempty"`
}

// Duration is DurationNS as a time.Duration.
func (r Rollout) Duration() time.Duration { return time.Duration(r.DurationNS) }

// Sides counts the failures by side.
func (r Rollout) Sides() map[string]int {
	m := map[string]int{}
	for _, f := range r.Failures {
		m[f.Side]++
	}
	return m
}

// Failure is one failed request and the pod event it is attributed to.
type Failure struct {
	// AtNS is the request's scheduled instant, from the rollout's start
	// (negative: after the previous rollout's tail, before this start).
	AtNS int64  `json:"at_ns"`
	Kind string `json:"kind"`
	Side string `json:"side"`
	// Pod is the pod whose deletion (shutdown) or Ready (startup) the
	// failure is attributed to; SinceNS is the failure's time from that
	// event (positive: after it).
	Pod     string `json:"pod,omitempty"`
	SinceNS int64  `json:"since_ns"`
	Basis   string `json:"basis"`
}

// PodExit is a terminated container of a replaced pod, from the pod's
// status (the kubelet's record).
type PodExit struct {
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Kind is "init" or "sidecar" (an init container with restartPolicy
	// Always) for those; empty for an app container.
	Kind string `json:"kind,omitempty"`
	// Previous is set for the container's last termination before a
	// restart (LastTerminationState), not its final one.
	Previous bool   `json:"previous,omitempty"`
	ExitCode int32  `json:"exit_code"`
	Reason   string `json:"reason,omitempty"`
	// NeverReady is set for a pod the tracker never saw Ready: no Service
	// routed to it (a surge pod of a template replaced while it started),
	// so its exit says nothing of draining and does not judge the gate. A
	// process stopped before it installed its SIGTERM handler exits 143.
	NeverReady bool `json:"never_ready,omitempty"`
}

// neverReadyNote is what the reports say beside a NeverReady exit.
const neverReadyNote = "never Ready, so no traffic to drain: not judged"

// Container kinds of PodExit.Kind.
const (
	ContainerInit    = "init"
	ContainerSidecar = "sidecar"
)

// Killed reports a SIGKILL: exit 137 (128 + 9, the kubelet's kill at the end
// of the grace period, or the kernel's OOM killer) or the OOMKilled reason.
func (e PodExit) Killed() bool { return e.ExitCode == 137 || e.Reason == "OOMKilled" }

// Failed reports an exit that fails the gate: a SIGKILL, or any other
// non-zero exit not in allowed (143 is 128 + SIGTERM: the app died of the
// default action of the signal it should drain on).
func (e PodExit) Failed(allowed []int32) bool {
	return !e.NeverReady && (e.Killed() || e.ExitCode != 0 && !slices.Contains(allowed, e.ExitCode))
}

// String reads "web-7d9-abc/app: 137 (Error, SIGKILL)", with "(sidecar)" or
// "(init)" after the container and "before a restart" for a previous
// termination.
func (e PodExit) String() string {
	name := e.Container
	if e.Kind != "" {
		name += " (" + e.Kind + ")"
	}
	s := fmt.Sprintf("%s/%s: %d", e.Pod, name, e.ExitCode)
	if e.Previous {
		s = fmt.Sprintf("%s/%s: %d before a restart", e.Pod, name, e.ExitCode)
	}
	var why []string
	if e.Reason != "" {
		why = append(why, e.Reason)
	}
	if e.ExitCode > 128 && e.ExitCode < 128+65 {
		why = append(why, signalName(e.ExitCode-128))
	}
	if len(why) > 0 {
		s += " (" + strings.Join(why, ", ") + ")"
	}
	return s
}

func signalName(n int32) string {
	switch n {
	case 9:
		return "SIGKILL"
	case 15:
		return "SIGTERM"
	case 2:
		return "SIGINT"
	case 6:
		return "SIGABRT"
	case 11:
		return "SIGSEGV"
	}
	return fmt.Sprintf("signal %d", n)
}

// PortCheck is the mechanism check of one terminating pod: its own port,
// read through the API server's pod proxy, against the instant its address
// left every EndpointSlice's ready endpoints (what ingress controllers and
// kube-proxy stop routing on).
type PortCheck struct {
	Pod string `json:"pod"`
	// LeftSlicesNS is when the address was no longer ready in any
	// EndpointSlice, from the pod's deletion.
	LeftSlicesNS int64 `json:"left_slices_ns"`
	// LastAnswerNS is the last answer on the port, from the deletion;
	// RefusedNS the first failed read after the deletion. Absent: never.
	LastAnswerNS *int64 `json:"last_answer_ns,omitempty"`
	RefusedNS    *int64 `json:"refused_ns,omitempty"`
	// Error is the first failed read's error.
	Error string `json:"error,omitempty"`
	// Seen is false when the address never left the slices while watched.
	Seen bool `json:"seen"`
}

// AnsweredAfter is how long the pod still answered after its address left
// the slices; negative when it stopped before (the ingress could still
// route to it). ok is false without the two instants.
func (p PortCheck) AnsweredAfter() (time.Duration, bool) {
	if !p.Seen || p.LastAnswerNS == nil {
		return 0, false
	}
	return time.Duration(*p.LastAnswerNS - p.LeftSlicesNS), true
}

// Ordered reports whether the pod kept answering until its address had left
// the slices, and refused (if at all) only after.
func (p PortCheck) Ordered() bool {
	if !p.Seen {
		return false
	}
	if p.RefusedNS != nil && *p.RefusedNS < p.LeftSlicesNS {
		return false
	}
	d, ok := p.AnsweredAfter()
	return ok && d >= 0
}

// String reads "web-abc: answered 5.1s after leaving the EndpointSlices" or
// "web-abc: refused 2ms after deletion, 4ms before leaving the EndpointSlices".
func (p PortCheck) String() string {
	ms := func(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }
	if !p.Seen {
		return p.Pod + ": its address did not leave the EndpointSlices while watched"
	}
	if p.Ordered() {
		return fmt.Sprintf("%s: answered %s after leaving the EndpointSlices", p.Pod, ms(*p.LastAnswerNS-p.LeftSlicesNS))
	}
	if p.RefusedNS != nil {
		rel := "before"
		d := p.LeftSlicesNS - *p.RefusedNS
		if d < 0 {
			rel, d = "after", -d
		}
		return fmt.Sprintf("%s: stopped answering %s after its deletion, %s %s leaving the EndpointSlices (the ingress could still route to it)",
			p.Pod, ms(*p.RefusedNS), ms(d), rel)
	}
	return p.Pod + ": never answered on the check port"
}

// SelfTest is the broken canary's run.
type SelfTest struct {
	Namespace string   `json:"namespace"`
	Replicas  int      `json:"replicas"`
	Outcomes  Outcomes `json:"outcomes"`
	// Terminations is how many canary pods were replaced.
	Terminations int `json:"terminations"`
	// WindowNS is the longest span from a canary pod's deletion to the
	// last failure attributed to it: a lower bound of the window.
	WindowNS int64 `json:"window_ns,omitempty"`
	// Blind is true when the canary's rollout failed no request.
	Blind bool `json:"blind"`
	// Cause says why the gate is likely blind.
	Cause string `json:"cause,omitempty"`
}

// Shape is the expected number of requests that reach a terminating pod in
// the window at this rate and replica count.
type Shape struct {
	WindowNS int64   `json:"window_ns"`
	Source   string  `json:"source"`
	Rate     float64 `json:"rate"`
	Replicas int     `json:"replicas"`
	// PerTermination is Rate / Replicas × window.
	PerTermination float64 `json:"per_termination"`
	Warning        string  `json:"warning,omitempty"`
}

// Verdict is the gate's decision.
type Verdict struct {
	Pass bool `json:"pass"`
	// Blind: the self-test saw no failure; the team's Deployment was not
	// touched.
	Blind   bool     `json:"blind,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
}
