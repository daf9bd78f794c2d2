package verify

import (
	"fmt"
	"math"
	"net/http"
	"time"
)

// minPerTermination is how many requests a terminating pod should get in
// the window for the test to see it: arrivals at a steady rate land in a
// window of random phase, and with an expected 3 the chance that none does
// is e^-3 ≈ 5% (Poisson), per termination.
const minPerTermination = 3

// shapeFor estimates how many requests reach a terminating pod in a window
// of length w at rate over replicas (an ingress spreads requests evenly), and
// warns when the test cannot see the window.
func shapeFor(w time.Duration, source string, rate float64, replicas int) *Shape {
	if w <= 0 || replicas < 1 {
		return nil
	}
	s := &Shape{WindowNS: int64(w), Source: source, Rate: rate, Replicas: replicas}
	s.PerTermination = rate / float64(replicas) * w.Seconds()
	if s.PerTermination < minPerTermination {
		need := math.Ceil(minPerTermination * float64(replicas) / w.Seconds())
		what := "may miss the window"
		if s.PerTermination < 1 {
			what = "cannot see the window"
		}
		s.Warning = fmt.Sprintf("at %g req/s over %d replicas a terminating pod gets about %.1f requests in its %s window: the test %s; use --%s %g or more",
			rate, replicas, s.PerTermination, w.Round(time.Millisecond), what, FlagRate, need)
	}
	return s
}

// idempotent reports whether ingress controllers retry a failed connect of
// this method on another endpoint (RFC 9110 section 9.2.2; Skipper and
// ingress-nginx retry only requests without a body, see load.Config.Method).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace:
		return true
	}
	return false
}

// blindCause says why a self-test that saw no failure is likely blind:
// the ingress retried idempotent requests, or the rate was too low for the
// window (when the window is known, from shape).
func blindCause(method string, shape *Shape) string {
	low := shape != nil && shape.PerTermination < minPerTermination
	switch {
	case idempotent(method) && low:
		return fmt.Sprintf("the ingress likely retried the refused %s on another pod, and the rate is low for the window (%s); use --%s POST and a higher --%s",
			method, shape.Warning, FlagMethod, FlagRate)
	case idempotent(method):
		return fmt.Sprintf("the ingress likely retried each refused %s on another pod (controllers retry idempotent requests whose connect failed): use --%s POST (with --%s), which they never retry",
			method, FlagMethod, FlagBody)
	case low:
		return "the rate is too low for the window: " + shape.Warning
	}
	return fmt.Sprintf("the rate is likely too low for the window (raise --%s), or the ingress retries even requests with a body", FlagRate)
}

// decide is the gate: pass only with the self-test able to fail, every
// requested rollout complete, at most maxFailures failed requests in all,
// a clean baseline, no SIGKILLed container and no other non-zero exit
// outside --allow-exit-codes.
func decide(r *Report, requested int) Verdict {
	v := Verdict{}
	if r.SelfTest != nil && r.SelfTest.Blind {
		v.Blind = true
		v.Reasons = append(v.Reasons, "self-test: the broken canary failed no request, so the gate is blind on this cluster: "+r.SelfTest.Cause)
		return v
	}
	if r.Interrupted {
		v.Reasons = append(v.Reasons, "interrupted")
	}
	if r.Baseline != nil && r.Baseline.Failures() > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d requests failed before any rollout (%s): the app or the route fails without a rollout", r.Baseline.Failures(), *r.Baseline))
	}
	if len(r.Rollouts) < requested && !r.Interrupted {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d of %d rollouts ran", len(r.Rollouts), requested))
	}
	failed := 0
	for _, ro := range r.Rollouts {
		failed += ro.Outcomes.Failures()
		if !ro.Complete {
			why := "did not complete"
			if ro.Condition != "" {
				why += ": " + ro.Condition
			}
			v.Reasons = append(v.Reasons, fmt.Sprintf("rollout %d %s", ro.N, why))
		}
		v.Reasons = append(v.Reasons, exitReasons(ro, r.AllowExitCodes)...)
	}
	if failed > r.MaxFailures {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d failed requests during the rollouts (--%s %d)", failed, FlagMaxFailures, r.MaxFailures))
	}
	v.Pass = len(v.Reasons) == 0
	return v
}

// exitReasons says why each replaced container's exit fails the gate.
func exitReasons(ro Rollout, allowed []int32) []string {
	var out []string
	for _, e := range ro.Exits {
		if !e.Failed(allowed) {
			continue
		}
		switch {
		case e.Killed():
			out = append(out, fmt.Sprintf("rollout %d: %s: killed at the end of the grace period (or out of memory); its shutdown was cut short", ro.N, e))
		case e.ExitCode == 143:
			out = append(out, fmt.Sprintf("rollout %d: %s: died of SIGTERM, which it does not handle, so it did not drain (--%s 143 to accept)", ro.N, e, FlagAllowExitCodes))
		default:
			out = append(out, fmt.Sprintf("rollout %d: %s: exited non-zero at shutdown (--%s %d to accept)", ro.N, e, FlagAllowExitCodes, e.ExitCode))
		}
	}
	return out
}
