package lint

import (
	"fmt"
	"slices"
	"strings"
)

// Level is a finding's severity, as SARIF names it.
type Level string

// Levels. Every unwaived finding fails the lint (exit 3); the level only
// orders them and tells code scanning how to show them.
const (
	LevelError   Level = "error"
	LevelWarning Level = "warning"
)

// Rule is one check. ID and Name are stable: --ignore, the waiver
// annotation and SARIF's ruleId use them.
type Rule struct {
	// ID is "EPW" and three digits.
	ID string `json:"id"`
	// Name is the ID in words, kebab-case.
	Name string `json:"name"`
	// Reason is what goes wrong at termination, one line.
	Reason string `json:"reason"`
	// Fix is what to change, one line.
	Fix   string `json:"fix"`
	Level Level  `json:"level"`
	// Policy is set when the admission policy enforces the rule: CEL sees
	// one object at a time, so rules that join objects are lint-only.
	Policy bool `json:"policy"`
}

// Rule IDs.
const (
	RuleReadinessProbe   = "EPW001"
	RulePreStopMissing   = "EPW002"
	RulePreStopShort     = "EPW003"
	RulePreStopUnknown   = "EPW004"
	RuleGraceShort       = "EPW005"
	RuleProbesShared     = "EPW006"
	RuleShellPID1        = "EPW007"
	RuleDistrolessExec   = "EPW008"
	RuleDeregistration   = "EPW009"
	RuleReadinessGate    = "EPW010"
	RuleAnnotationSyntax = "EPW011"
	RuleHeadlessNotReady = "EPW012"
)

// Rules are every rule, in ID order. Read-only.
var Rules = []Rule{
	{ID: RuleReadinessProbe, Name: "readiness-probe-missing", Level: LevelError, Policy: true,
		Reason: "a serving container without a readiness probe is Ready (and routed to) as soon as it starts, before it listens",
		Fix:    "add a readinessProbe on the port it serves"},
	{ID: RulePreStopMissing, Name: "prestop-missing", Level: LevelError, Policy: true,
		Reason: "without a preStop hook or an in-app delay the app gets SIGTERM while ingresses, kube-proxy and load balancers still route to it",
		Fix:    "add lifecycle.preStop.sleep.seconds (or annotate the pod epwindow.io/shutdown-delay if the app keeps serving after SIGTERM itself)"},
	{ID: RulePreStopShort, Name: "prestop-too-short", Level: LevelError, Policy: true,
		Reason: "the app stops serving before the measured propagation window has passed",
		Fix:    "raise the preStop sleep (or the declared in-app delay) to the measured number"},
	{ID: RulePreStopUnknown, Name: "prestop-length-unknown", Level: LevelWarning, Policy: true,
		Reason: "the preStop hook's length cannot be read from the manifest (an httpGet path or a command that is not a sleep)",
		Fix:    "use the sleep action, or tell lint the path's length with --http-prestop PATH=DUR"},
	{ID: RuleGraceShort, Name: "grace-too-short", Level: LevelError, Policy: true,
		Reason: "terminationGracePeriodSeconds includes the preStop time: the kubelet SIGKILLs the app before its requests drain",
		Fix:    "raise terminationGracePeriodSeconds to preStop + drain + headroom"},
	{ID: RuleProbesShared, Name: "probes-share-endpoint", Level: LevelWarning, Policy: true,
		Reason: "liveness and readiness hit the same endpoint and liveness gives up no later: each readiness failure restarts the container while it is still routed to",
		Fix:    "give liveness its own endpoint, or a higher failureThreshold × periodSeconds than readiness"},
	{ID: RuleShellPID1, Name: "shell-pid1", Level: LevelError, Policy: true,
		Reason: "a shell as PID 1 does not forward SIGTERM: the app never drains and is SIGKILLed at the end of the grace period",
		Fix:    "exec the app (`exec app …` as the script's last command), or run it directly"},
	{ID: RuleDistrolessExec, Name: "distroless-exec-sleep", Level: LevelError, Policy: true,
		Reason: "the image has no sleep binary: the exec hook fails at once and the kubelet sends SIGTERM without any delay",
		Fix:    "use the preStop sleep action (lifecycle.preStop.sleep.seconds, Kubernetes 1.30+)"},
	{ID: RuleDeregistration, Name: "lb-deregistration-delay", Level: LevelError,
		Reason: "the AWS target group keeps sending to a deregistering IP target until its deregistration delay ends, which the preStop must outlast",
		Fix:    "set deregistration_delay.timeout_seconds below the preStop sleep (the target group's default is 300 s)"},
	{ID: RuleReadinessGate, Name: "readiness-gate-label-missing", Level: LevelError,
		Reason: "without the AWS Load Balancer Controller's readiness gate a new pod is Ready before its target is healthy, and a rollout can leave the target group empty",
		Fix:    "label the namespace elbv2.k8s.aws/pod-readiness-gate-inject=enabled"},
	{ID: RuleAnnotationSyntax, Name: "annotation-invalid", Level: LevelError,
		Reason: "an epwindow.io annotation does not parse, so what it declares is ignored",
		Fix:    "write a duration such as 15s (shutdown-delay, deregistration-delay), or a reason after a waiver"},
	{ID: RuleHeadlessNotReady, Name: "headless-publish-not-ready", Level: LevelWarning,
		Reason: "publishNotReadyAddresses keeps a terminating pod's endpoint ready, and CoreDNS answers a headless Service with its ready endpoints: clients resolve a deleted pod's address for its whole termination",
		Fix:    "remove spec.publishNotReadyAddresses; pods that must find not-ready peers belong to a StatefulSet with its own governing Service"},
}

// RuleByID returns the rule with an ID or a Name.
func RuleByID(idOrName string) (Rule, bool) {
	for _, r := range Rules {
		if strings.EqualFold(r.ID, idOrName) || r.Name == idOrName {
			return r, true
		}
	}
	return Rule{}, false
}

func mustRule(id string) Rule {
	r, ok := RuleByID(id)
	if !ok {
		panic("lint: unknown rule " + id)
	}
	return r
}

// ParseIgnore resolves --ignore values (IDs or names) to IDs.
func ParseIgnore(values []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			r, ok := RuleByID(s)
			if !ok {
				ids := make([]string, 0, len(Rules))
				for _, r := range Rules {
					ids = append(ids, r.ID)
				}
				return nil, fmt.Errorf("--ignore %q: not a rule (one of %s, or a rule's name)", s, strings.Join(ids, ", "))
			}
			out[r.ID] = true
		}
	}
	return out, nil
}

// Annotations the rules read. Each may sit on the workload's metadata or on
// its pod template's (the template's wins: it is what live pods carry).
const (
	// AnnotationShutdownDelay declares an in-app delay: the app keeps
	// serving this long after SIGTERM by itself (a Go duration, "15s").
	AnnotationShutdownDelay = "epwindow.io/shutdown-delay"
	// AnnotationDistroless marks images without a shell or sleep binary:
	// "true" for every container, or a comma-separated list of names.
	AnnotationDistroless = "epwindow.io/distroless"
	// AnnotationDeregistrationDelay declares a TargetGroupBinding's target
	// group deregistration delay (set in AWS, not in the cluster).
	AnnotationDeregistrationDelay = "epwindow.io/deregistration-delay"
	// AnnotationStreamDrain declares how long the app takes after SIGTERM
	// to end its long-lived streams (WebSocket, gRPC): the U(stream drain)
	// epwindow measure --streams reports. The grace period must cover
	// preStop + max(drain, stream drain) + headroom.
	AnnotationStreamDrain = "epwindow.io/stream-drain"
	// WaiverPrefix + a rule's ID or name waives it for the object; the
	// value is the reason and must not be empty.
	WaiverPrefix = "lint.epwindow.io/"
)

// sortedIDs lists a set's IDs in order.
func sortedIDs(set map[string]bool) []string {
	var out []string
	for id := range set {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
