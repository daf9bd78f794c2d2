package results

import (
	"fmt"
	"strings"
	"time"
)

// Startup stage names: the new pod that replaces a trial's deleted one, from
// its creation to the first request it receives (DESIGN.md "Stages",
// startup side). Their offsets are from the trial's T0 like every stage's;
// in rollout mode, where the new pod comes first, they are negative.
const (
	StagePodCreated        = "pod_created"
	StagePodScheduled      = "pod_scheduled"
	StageContainerStarted  = "container_started"
	StageListenerOpen      = "listener_open"
	StagePodReadyCondition = "pod_ready_condition"
	StageSliceReady        = "slice_ready"
	StageUpstreamPresent   = "upstream_present" // keyed by observer/replica
	StageFirstRequest      = "first_request"
	StageClientFirstRouted = "client_first_routed"
)

// StartupPoints are the startup stages the reports tabulate, in causal
// order. upstream_present contributes its latest replica: the one that
// completes routing. Read-only.
var StartupPoints = []string{
	StagePodCreated,
	StagePodScheduled,
	StageContainerStarted,
	StageListenerOpen,
	StagePodReadyCondition,
	StageSliceReady,
	StageUpstreamPresent,
	StageFirstRequest,
	StageClientFirstRouted,
}

// StartupDeltas are the startup's stage-to-stage durations: scheduling,
// the app's own start, readiness, and what routing adds after Ready — the
// gap a Deployment's minReadySeconds or a load balancer's readiness gate
// must cover. Read-only.
var StartupDeltas = []Delta{
	{StagePodCreated, StagePodScheduled},
	{StagePodScheduled, StageContainerStarted},
	{StageContainerStarted, StageListenerOpen},
	{StageContainerStarted, StagePodReadyCondition},
	{StagePodReadyCondition, StageSliceReady},
	{StagePodReadyCondition, StageUpstreamPresent},
	{StageSliceReady, StageListenerOpen},
	{StageListenerOpen, StageFirstRequest},
	{StagePodReadyCondition, StageClientFirstRouted},
}

// deltaReadyToUpstream is what routing adds after the pod is Ready.
var deltaReadyToUpstream = Delta{StagePodReadyCondition, StageUpstreamPresent}.Name()

// ReadinessGateLabel is the namespace label that makes the AWS Load
// Balancer Controller inject its pod readiness gate: the pod is Ready only
// once its target is healthy in the target group.
const ReadinessGateLabel = "elbv2.k8s.aws/pod-readiness-gate-inject: enabled"

// StartupRecommendation is the startup side's advice.
type StartupRecommendation struct {
	// N is the number of trials behind LagNS; Quantile the one asked.
	N        int     `json:"n"`
	Quantile float64 `json:"quantile"`
	// LagNS bounds pod_ready_condition → upstream_present at Quantile;
	// Claim says how (see startupBound), and Lag is the bound itself.
	LagNS int64  `json:"lag_ns"`
	Claim string `json:"claim"`
	Lag   *Bound `json:"lag,omitempty"`
	// MinReadySeconds is the Deployment minReadySeconds covering LagNS (0:
	// routing follows Ready within the second).
	MinReadySeconds int64 `json:"min_ready_seconds,omitempty"`
	// ReadinessGate is set when the load balancer can hold Ready until it
	// routes (AWS Load Balancer Controller): use its gate instead.
	ReadinessGate string `json:"readiness_gate,omitempty"`
	// RoutedBeforeListening counts trials whose new pod was ready in the
	// slices before its listener opened, or whose load failed during its
	// startup: a readiness probe is missing (or does not test the serving
	// port).
	RoutedBeforeListening int `json:"routed_before_listening,omitempty"`
	// StartupTrials counts the trials with startup stages.
	StartupTrials int `json:"startup_trials"`
}

// MissingReadinessProbe reports whether traffic was routed to a new pod
// before it listened.
func (r *StartupRecommendation) MissingReadinessProbe() bool { return r.RoutedBeforeListening > 0 }

// startupBound is the distribution-free upper confidence bound of the
// q-quantile of the startup lag at confidence conf: the shutdown side's
// (newBound, from order statistics).
func startupBound(x *sample, q, conf float64) (Bound, bool) { return newBound(x, q, conf) }

// routedBeforeListening reports whether r's new pod was ready in the slices
// before its listener opened (beyond the skew bound), or its load failed
// during the startup.
func routedBeforeListening(r *Record) bool {
	if len(r.StartupFailures) > 0 {
		return true
	}
	d, ok := r.Between(StageSliceReady, StageListenerOpen)
	return ok && d > r.MaxUncertainty(StageListenerOpen)
}

// addStartup adds a trial's startup samples: every point its reasons leave
// valid (no shutdown-side fault touches them). A startup never runs into
// the hold, so nothing here is censored.
func (s *Summary) addStartup(r *Record) {
	has := false
	for _, p := range StartupPoints {
		if !r.PointValid(p) {
			continue
		}
		if v, ok := r.Offset(p); ok {
			s.add(p, r.Trial, v, false)
			has = true
		}
	}
	if !has {
		return
	}
	s.startupTrials++
	for _, dl := range StartupDeltas {
		if !r.PointValid(dl.From) || !r.PointValid(dl.To) {
			continue
		}
		if v, ok := r.Between(dl.From, dl.To); ok {
			s.add(dl.Name(), r.Trial, v, false)
		}
	}
	for k, n := range r.StartupFailures {
		if s.doc.StartupFailures == nil {
			s.doc.StartupFailures = map[string]int{}
		}
		s.doc.StartupFailures[k] += n
	}
	if routedBeforeListening(r) {
		s.routedEarly++
	}
}

// closeStartup builds the startup distributions and recommendation.
func (s *Summary) closeStartup(o Options) {
	d := &s.doc
	for _, p := range StartupPoints {
		if s.samples[p].n() == 0 {
			continue
		}
		dist := newDist(p, s.samples[p], o.Quantile, o.Confidence)
		dist.MaxUncertaintyNS = int64(s.maxUncertainty(p))
		d.StartupStages = append(d.StartupStages, dist)
	}
	for _, dl := range StartupDeltas {
		if n := dl.Name(); s.samples[n].n() > 0 {
			d.StartupDeltas = append(d.StartupDeltas, newDist(n, s.samples[n], o.Quantile, o.Confidence))
		}
	}
	if s.startupTrials == 0 {
		return
	}
	r := &StartupRecommendation{Quantile: o.Quantile, StartupTrials: s.startupTrials, RoutedBeforeListening: s.routedEarly}
	if b, ok := startupBound(s.samples[deltaReadyToUpstream], o.Quantile, o.Confidence); ok {
		r.N, r.Lag, r.LagNS, r.Claim = b.N, &b, b.NS, b.Claim()
		r.MinReadySeconds = ceilSeconds(time.Duration(r.LagNS))
		if s.readinessGate() {
			r.ReadinessGate = ReadinessGateLabel
		}
	}
	d.StartupRecommendation = r
}

// readinessGate reports whether the run's load balancer supports a pod
// readiness gate: the AWS Load Balancer Controller (class alb, or its
// controller name).
func (s *Summary) readinessGate() bool {
	h := s.Header
	if h == nil {
		return false
	}
	c := strings.ToLower(h.Ingress.Controller)
	return h.Ingress.Class == "alb" || strings.Contains(c, "elbv2") || strings.Contains(c, "aws-load-balancer")
}

// Lines renders the startup recommendation, one sentence a line.
func (r *StartupRecommendation) Lines() []string {
	var out []string
	if r.MissingReadinessProbe() {
		out = append(out, fmt.Sprintf("A readiness probe is missing: in %d of %d trials the new pod was routed to before its listener opened (refused connections, 502s). Give the container a readinessProbe on its serving port.",
			r.RoutedBeforeListening, r.StartupTrials))
	}
	if r.N == 0 {
		return append(out, "No trial timed the upstream's first listing of the new pod (no observer?): no minReadySeconds advice.")
	}
	lag := fmt.Sprintf("pod_ready_condition → upstream_present %s %s (%s)", "≤", fmtDur(r.LagNS), r.Claim)
	switch {
	case r.ReadinessGate != "":
		out = append(out, fmt.Sprintf("%s: Ready comes before the load balancer routes to the pod. Turn on the controller's pod readiness gate with the namespace label %s, so Ready waits for the target to be healthy.", lag, r.ReadinessGate))
	case r.MinReadySeconds > 0:
		out = append(out, fmt.Sprintf("%s: Ready comes before the ingress routes to the pod. Set the Deployment's minReadySeconds: %d, so a rollout deletes no old pod before its replacement is routed.", lag, r.MinReadySeconds))
	default:
		out = append(out, lag+": routing follows Ready; no minReadySeconds needed.")
	}
	return out
}
