package nodeagent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// sidecarOf is the pod's app container turned into a native sidecar
// (restartPolicy Always) serving port, with its readiness probe and preStop
// hook on that port.
func sidecarOf(pod *v1.Pod, name string, port int32, args ...string) v1.Container {
	c := *pod.Spec.Containers[0].DeepCopy()
	c.Name, c.Args = name, append(args, "port="+itoa(int(port)))
	c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	c.Ports = []v1.ContainerPort{{ContainerPort: port}}
	c.ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port)}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/prestop", Port: intstr.FromInt32(port)}}}
	return c
}

// startupGated gives the sidecar c a startup probe on its /healthz, so that
// nothing after it starts before it serves.
func startupGated(c v1.Container) v1.Container {
	c.StartupProbe = c.ReadinessProbe.DeepCopy()
	c.StartupProbe.FailureThreshold = 10
	return c
}

// terminatedReport is the test app's report in a terminated container's
// message.
func terminatedReport(t *testing.T, cs v1.ContainerStatus) appReport {
	t.Helper()
	term := cs.State.Terminated
	var rep appReport
	if term == nil || json.Unmarshal([]byte(term.Message), &rep) != nil {
		t.Fatalf("container %s: no report in its terminated state %+v", cs.Name, cs.State)
	}
	return rep
}

// runningReport is the report of a test app still serving port in the pod.
func runningReport(t *testing.T, p *v1.Pod, port int32) appReport {
	t.Helper()
	resp, err := http.Get("http://" + p.Status.PodIP + ":" + itoa(int(port)) + "/report")
	if err != nil {
		t.Fatalf("GET /report on port %d: %v", port, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var rep appReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report %q on port %d: %v", b, port, err)
	}
	return rep
}

func condition(p *v1.Pod, ct v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == ct {
			return c.Status
		}
	}
	return ""
}

func TestSidecarStartupProbeGatesTheNextContainer(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("gated-c")
	// The sidecar listens 2 s after its start; its startup probe (period
	// 1 s) passes only then, and only then may the init container run.
	pod.Spec.InitContainers = []v1.Container{startupGated(sidecarOf(pod, "side", 8081, "listen-after=2s")), initOf(pod, "init", "exit-0")}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	ics := p.Status.InitContainerStatuses
	if len(ics) != 2 {
		t.Fatalf("init container statuses %+v, want 2", ics)
	}
	if s := ics[0]; s.State.Running == nil || s.Started == nil || !*s.Started || !s.Ready || s.RestartCount != 0 {
		t.Errorf("sidecar status %+v, want running, started, ready, never restarted", s)
	}
	if s := ics[1]; s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 || !s.Ready {
		t.Errorf("init container status %+v, want completed", s)
	}
	if p.Status.Phase != v1.PodRunning || condition(p, v1.PodInitialized) != v1.ConditionTrue {
		t.Errorf("phase %s Initialized %s, want Running and True while the sidecar runs", p.Status.Phase, condition(p, v1.PodInitialized))
	}
	sideStart := time.Unix(0, runningReport(t, p, 8081).StartedNS)
	initStart := time.Unix(0, terminatedReport(t, ics[1]).StartedNS)
	appStart := time.Unix(0, runningReport(t, p, 8080).StartedNS)
	if d := initStart.Sub(sideStart); d < 2*time.Second {
		t.Errorf("init container started %s after the sidecar, want after its startup probe passed (≥ 2 s)", d)
	}
	if !appStart.After(initStart) {
		t.Errorf("app started at %s, before the init container (%s)", appStart, initStart)
	}
}

func TestSidecarRestartsWhateverThePodRestartPolicy(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("restarty-d")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	// A sidecar that exits 0 at once: restarted (Never and OnFailure
	// notwithstanding), immediately the first time, then after 10 s.
	side := sidecarOf(pod, "side", 8081)
	side.Args = []string{"exit-0"}
	side.Lifecycle = nil
	pod.Spec.InitContainers = []v1.Container{side}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, client, pod.Name, 30*time.Second, "sidecar in CrashLoopBackOff, app running", func(p *v1.Pod, _ watch.EventType) bool {
		ics, cs := p.Status.InitContainerStatuses, p.Status.ContainerStatuses
		return len(ics) == 1 && ics[0].State.Waiting != nil && ics[0].State.Waiting.Reason == "CrashLoopBackOff" &&
			len(cs) == 1 && cs[0].State.Running != nil && cs[0].Ready
	})
	s := p.Status.InitContainerStatuses[0]
	if s.RestartCount != 1 || s.LastTerminationState.Terminated == nil || s.LastTerminationState.Terminated.ExitCode != 0 || s.Ready {
		t.Errorf("sidecar status %+v, want restartCount 1, last exit 0, not ready", s)
	}
	// getPhase ignores a sidecar waiting to restart once the pod has
	// initialized; its readiness still counts (status/generate.go).
	if p.Status.Phase != v1.PodRunning || condition(p, v1.PodInitialized) != v1.ConditionTrue ||
		condition(p, v1.ContainersReady) != v1.ConditionFalse || podReady(p) {
		t.Errorf("phase %s conditions %+v, want Running, Initialized, not ready (the sidecar is not)", p.Status.Phase, p.Status.Conditions)
	}
}

func TestSidecarsStopAfterTheAppInReverseOrder(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("ordered-e", "linger=1s")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(10))
	pod.Spec.InitContainers = []v1.Container{sidecarOf(pod, "side-a", 8081), sidecarOf(pod, "side-b", 8082, "linger=1s")}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	del := deleteGracefully(t, client, pod.Name)
	final := del.lastStatus(t, 20*time.Second)
	took := time.Since(del.t0)
	if final == nil || len(final.Status.InitContainerStatuses) != 2 || len(final.Status.ContainerStatuses) != 1 {
		t.Fatalf("last status before deletion: %+v", final)
	}
	app := terminatedReport(t, final.Status.ContainerStatuses[0])
	a := terminatedReport(t, final.Status.InitContainerStatuses[0])
	b := terminatedReport(t, final.Status.InitContainerStatuses[1])
	at := func(ns int64) time.Duration { return time.Unix(0, ns).Sub(del.t0) }
	// The app exits 1 s after its SIGTERM; side-b (declared last) is
	// stopped only then, and side-a after side-b's exit, 1 s later
	// (kuberuntime_termination_order.go).
	if at(b.SigtermNS) < at(app.SigtermNS)+time.Second {
		t.Errorf("side-b SIGTERM at %s, app SIGTERM at %s: want the sidecar stopped after the app exited (≥ 1 s later)", at(b.SigtermNS), at(app.SigtermNS))
	}
	if at(a.SigtermNS) < at(b.SigtermNS)+time.Second {
		t.Errorf("side-a SIGTERM at %s, side-b SIGTERM at %s: want reverse declaration order, after side-b exited", at(a.SigtermNS), at(b.SigtermNS))
	}
	// The kubelet runs a sidecar's preStop hook when the pod's termination
	// begins, with the app's (killContainer: executePreStopHook comes
	// before waitForTurn); only its SIGTERM waits.
	for name, rep := range map[string]appReport{"side-a": a, "side-b": b} {
		if rep.PreStopNS == 0 || at(rep.PreStopNS) > 500*time.Millisecond {
			t.Errorf("%s preStop at %s, want at the start of the termination", name, at(rep.PreStopNS))
		}
	}
	// All of it inside the one grace period, every container exiting at its
	// SIGTERM (0), none killed. (About 2 s here; a -race build adds 1 s per
	// exit, GORACE atexit_sleep_ms.)
	if took >= 10*time.Second {
		t.Errorf("deletion took %s, beyond the 10 s grace period", took)
	}
	for _, s := range append(final.Status.InitContainerStatuses, final.Status.ContainerStatuses...) {
		if s.State.Terminated.ExitCode != 0 {
			t.Errorf("%s exited %d, want 0 (SIGTERM), not SIGKILL at the grace period", s.Name, s.State.Terminated.ExitCode)
		}
	}
	if final.Status.Phase != v1.PodSucceeded {
		t.Errorf("phase %s, want Succeeded", final.Status.Phase)
	}
}

func TestPodWithSidecarCompletes(t *testing.T) {
	client, cfg := startTestAgent(t)
	pod := testPod("completing-f", "exit-0")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Containers[0].ReadinessProbe, pod.Spec.Containers[0].Lifecycle = nil, nil
	// The startup probe holds the app back until the sidecar serves its
	// preStop hook.
	pod.Spec.InitContainers = []v1.Container{startupGated(sidecarOf(pod, "side", 8081))}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The app's exit ends the pod: the kubelet kills the sidecar, which
	// does not keep a finished pod alive (computePodActions: KillPod).
	p := waitPod(t, client, pod.Name, 30*time.Second, "Succeeded", func(p *v1.Pod, _ watch.EventType) bool { return p.Status.Phase == v1.PodSucceeded })
	rep := terminatedReport(t, p.Status.InitContainerStatuses[0])
	if rep.PreStopNS == 0 || rep.SigtermNS == 0 {
		t.Errorf("sidecar report %+v, want its preStop and SIGTERM", rep)
	}
	releasedThenDeleted(t, client, cfg, pod.Name)
}

func TestFailedInitContainerStopsTheSidecar(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("initfail-g")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.InitContainers = []v1.Container{startupGated(sidecarOf(pod, "side", 8081)), initOf(pod, "init", "exit-3")}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Under Never a failed init container fails the pod; its sidecar is
	// stopped (preStop, SIGTERM) rather than left running.
	p := waitPod(t, client, pod.Name, 30*time.Second, "Failed", func(p *v1.Pod, _ watch.EventType) bool { return p.Status.Phase == v1.PodFailed })
	if rep := terminatedReport(t, p.Status.InitContainerStatuses[0]); rep.PreStopNS == 0 || rep.SigtermNS == 0 {
		t.Errorf("sidecar report %+v, want its preStop and SIGTERM", rep)
	}
	if cs := p.Status.ContainerStatuses[0]; cs.State.Waiting == nil || cs.ContainerID != "" {
		t.Errorf("app status %+v, want never created (waiting)", cs)
	}
}
