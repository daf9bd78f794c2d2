package nodeagent

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerView is what the agent knows about one container.
type containerView struct {
	Name         string
	Image        string
	ContainerID  string
	State        v1.ContainerState
	LastState    v1.ContainerState
	Ready        bool
	RestartCount int32
	// Ever is true once the container has been started at least once.
	Ever bool
	// Started is true while it runs and its startup probe (if any) passed.
	Started bool
	// Sidecar marks a restartable init container (restartPolicy Always).
	Sidecar bool
}

// podView is what the agent knows about a pod; buildStatus renders it.
type podView struct {
	HostIP       string
	PodIP        string
	StartTime    time.Time
	NetworkReady bool
	// Terminal is true once the pod's containers have all stopped for good
	// (deletion finished, or they exited and will not restart).
	Terminal   bool
	Containers []containerView
	// InitContainers run before Containers; InitDone once every regular
	// one exited 0 and every sidecar started.
	InitContainers []containerView
	InitDone       bool
	// Conditions carries each owned condition's status and its last
	// transition (see updateConditions).
	Conditions map[v1.PodConditionType]condState
}

// condState is a condition's status and when it last changed.
type condState struct {
	Status bool
	Since  time.Time
}

// ownedConditions are the pod conditions the kubelet sets, in its order
// (pkg/kubelet/status/generate.go); PodScheduled belongs to the scheduler.
var ownedConditions = []v1.PodConditionType{
	v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady,
}

// wantConditions is each owned condition's status for v. Sidecars'
// readiness counts as the containers' (pkg/kubelet/status/generate.go,
// GenerateContainersReadyCondition).
func wantConditions(v podView) map[v1.PodConditionType]bool {
	ready := len(v.Containers) > 0 && !v.Terminal
	for _, c := range v.Containers {
		ready = ready && c.Ready
	}
	for _, c := range v.InitContainers {
		ready = ready && (!c.Sidecar || c.Ready)
	}
	return map[v1.PodConditionType]bool{
		v1.PodReadyToStartContainers: v.NetworkReady && !v.Terminal,
		v1.PodInitialized:            v.InitDone,
		v1.ContainersReady:           ready,
		v1.PodReady:                  ready,
	}
}

// updateConditions returns prev with the statuses of want, keeping a
// condition's transition time unless its status changed.
func updateConditions(prev map[v1.PodConditionType]condState, want map[v1.PodConditionType]bool, now time.Time) map[v1.PodConditionType]condState {
	out := map[v1.PodConditionType]condState{}
	for t, s := range want {
		if p, ok := prev[t]; ok && p.Status == s {
			out[t] = p
			continue
		}
		out[t] = condState{Status: s, Since: now}
	}
	return out
}

// podPhase is the pod's phase as the kubelet computes it
// (pkg/kubelet/kubelet_pods.go, getPhase): Pending until every container
// has started once, Running while any may still run, and once terminal
// Succeeded when every container exited 0, else Failed. Sidecars count only
// until they first started (InitDone): one waiting to restart, or stopped at
// the end, changes nothing.
func podPhase(v podView) v1.PodPhase {
	if v.Terminal {
		for _, c := range v.Containers {
			if c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 {
				return v1.PodFailed
			}
		}
		return v1.PodSucceeded
	}
	if len(v.Containers) == 0 || !v.InitDone {
		return v1.PodPending
	}
	for _, c := range v.Containers {
		if !c.Ever {
			return v1.PodPending
		}
	}
	return v1.PodRunning
}

// buildStatus renders v as the pod status the agent reports (the fields it
// owns; PodScheduled and the rest are left to their writers).
func buildStatus(v podView) v1.PodStatus {
	s := v1.PodStatus{Phase: podPhase(v)}
	if v.HostIP != "" {
		s.HostIP = v.HostIP
		s.HostIPs = []v1.HostIP{{IP: v.HostIP}}
	}
	if v.PodIP != "" {
		s.PodIP = v.PodIP
		s.PodIPs = []v1.PodIP{{IP: v.PodIP}}
	}
	if !v.StartTime.IsZero() {
		t := metav1.NewTime(v.StartTime)
		s.StartTime = &t
	}
	for _, t := range ownedConditions {
		c, ok := v.Conditions[t]
		if !ok {
			continue
		}
		st := v1.ConditionFalse
		if c.Status {
			st = v1.ConditionTrue
		}
		cond := v1.PodCondition{Type: t, Status: st, LastTransitionTime: metav1.NewTime(c.Since)}
		if !c.Status && t == v1.PodInitialized {
			cond.Reason = "ContainersNotInitialized"
		}
		if !c.Status && (t == v1.ContainersReady || t == v1.PodReady) {
			cond.Reason = "ContainersNotReady"
			if v.Terminal {
				cond.Reason = "PodCompleted"
			}
		}
		s.Conditions = append(s.Conditions, cond)
	}
	for _, c := range v.InitContainers {
		if c.Sidecar {
			s.InitContainerStatuses = append(s.InitContainerStatuses, containerStatus(c))
			continue
		}
		cs := containerStatus(c)
		// Ready once completed (prober_manager.go, UpdatePodStatus);
		// started while it runs, it has no startup probe.
		cs.Ready = c.State.Terminated != nil && c.State.Terminated.ExitCode == 0
		*cs.Started = c.State.Running != nil
		s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
	}
	for _, c := range v.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, containerStatus(c))
	}
	return s
}

// containerStatus renders a regular container or a sidecar: started once
// its startup probe passed, ready while running and ready
// (prober_manager.go, UpdatePodStatus).
func containerStatus(c containerView) v1.ContainerStatus {
	started := c.State.Running != nil && c.Started
	return v1.ContainerStatus{
		Name:                 c.Name,
		Image:                c.Image,
		ImageID:              c.Image,
		ContainerID:          c.ContainerID,
		State:                c.State,
		LastTerminationState: c.LastState,
		Ready:                c.Ready && c.State.Running != nil,
		RestartCount:         c.RestartCount,
		Started:              &started,
	}
}
