package nodeagent

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// minimumGracePeriod is the kubelet's floor for the SIGTERM→SIGKILL wait
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go,
// minimumGracePeriodInSeconds): even a force-deleted pod gets 2 s.
const minimumGracePeriod = 2

// podGracePeriod is the grace period in seconds the kubelet uses to kill a
// deleted pod's containers (kuberuntime_container.go,
// setTerminationGracePeriod): the deletion's grace period, else the spec's,
// else the minimum.
func podGracePeriod(pod *v1.Pod) int64 {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return minimumGracePeriod
}

// stopTimeout is how long the runtime waits between SIGTERM and SIGKILL
// (kuberuntime_container.go, killContainer): the grace period minus the
// preStop hook's run time, then minus a sidecar's wait for its turn
// (waiting), each in whole seconds (executePreStopHook returns int64
// seconds, waitForTurn's float64 is truncated), never below the 2 s
// minimum. Termination therefore lasts grace + a fraction of a second at
// most, or longer for a sidecar whose turn came late.
func stopTimeout(grace int64, hook, waiting time.Duration) time.Duration {
	return time.Duration(max(graceLeft(graceLeft(grace, hook), waiting), minimumGracePeriod)) * time.Second
}

// graceLeft is the grace period in seconds left after a wait of took. The
// kubelet skips a wait (preStop, turn) when nothing is left, so nothing is
// subtracted then.
func graceLeft(grace int64, took time.Duration) int64 {
	if grace <= 0 {
		return grace
	}
	return grace - int64(took.Seconds())
}

// isSidecar reports whether an init container is a native sidecar, one
// with restartPolicy Always (pkg/api/v1/pod/util.go,
// IsRestartableInitContainer).
func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// Restart backoff of exited containers, as the kubelet's defaults
// (pkg/kubelet/kubelet.go: backOffPeriod 10 s, MaxContainerBackOff 300 s):
// the first restart is immediate, later ones wait 10 s, 20 s, … 300 s. A
// container that ran backoffReset without exiting starts over.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 300 * time.Second
	backoffReset   = 10 * time.Minute
)

// restartDelay is the wait before restart number n+1 of a container that
// has been restarted n times in a row (n counts from 0).
func restartDelay(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := backoffInitial
	for i := 1; i < n && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

// shouldRestart reports whether a container that exited with code is
// restarted under the pod's restart policy. Sidecars restart whatever it
// says (see exited); other per-container restart rules (the
// ContainerRestartRules feature) are not supported.
func shouldRestart(policy v1.RestartPolicy, code int32) bool {
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}
