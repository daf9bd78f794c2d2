package nodeagent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

func TestPreStopSleepCountsAgainstGrace(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("sleepy-4", "ignore-term")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(5))
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 2}}}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	del := deleteGracefully(t, client, pod.Name)
	t0 := del.t0
	var final *v1.Pod
	del.wait(t, 20*time.Second, "deleted by the agent", func(p *v1.Pod, ev watch.EventType) bool {
		final = p
		return ev == watch.Deleted
	})
	took := time.Since(t0)
	term := final.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 137 {
		t.Fatalf("final state %+v, want killed (137)", final.Status.ContainerStatuses[0].State)
	}
	var rep appReport
	if err := json.Unmarshal([]byte(term.Message), &rep); err != nil {
		t.Fatalf("termination message %q: %v", term.Message, err)
	}
	// SIGTERM after the 2 s sleep hook; SIGKILL 5 − 2 = 3 s later, so the
	// whole termination is the 5 s grace period. The bounds allow 0.5 s
	// for the signal's delivery and 1 s for SIGKILL, CNI DEL and two API
	// calls, on a loaded 2-core machine.
	sigterm := time.Unix(0, rep.SigtermNS).Sub(t0)
	if sigterm < 2*time.Second || sigterm > 2500*time.Millisecond {
		t.Errorf("SIGTERM %s after the delete, want just after the 2 s preStop sleep", sigterm)
	}
	if took < 5*time.Second || took > 6*time.Second {
		t.Errorf("deleted %s after the delete, want the 5 s grace period", took)
	}
}

func TestPreStopExecRunsInPodNetns(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("execy-5")
	// The hook GETs the app on 127.0.0.1: only the pod's own loopback has it.
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{
		Command: []string{"/bin/testapp", testGetArg, "http://127.0.0.1:8080/prestop"},
	}}}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	del := deleteGracefully(t, client, pod.Name)
	var final *v1.Pod
	del.wait(t, 20*time.Second, "deleted by the agent", func(p *v1.Pod, ev watch.EventType) bool {
		final = p
		return ev == watch.Deleted
	})
	term := final.Status.ContainerStatuses[0].State.Terminated
	var rep appReport
	if term == nil || json.Unmarshal([]byte(term.Message), &rep) != nil {
		t.Fatalf("no report in the final state %+v", final.Status.ContainerStatuses[0].State)
	}
	if rep.PreStopNS == 0 || rep.PreStopNS > rep.SigtermNS {
		t.Errorf("exec preStop at %d, SIGTERM at %d: want the hook's GET before SIGTERM", rep.PreStopNS, rep.SigtermNS)
	}
}

func TestForceDeleteCutsTheGracePeriod(t *testing.T) {
	client, cfg := startTestAgent(t)
	pod := testPod("forced-6", "ignore-term")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(60))
	pod.Spec.Containers[0].Lifecycle = nil
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	deleteGracefully(t, client, pod.Name)
	time.Sleep(500 * time.Millisecond) // let the SIGTERM go out
	// A force delete removes the object at once; the agent then allows
	// only the kubelet's 2 s minimum.
	t0 := time.Now()
	if err := client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	ns := cfg.netnsName(string(p.UID))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if l, _ := listNetns(cfg.Prefix); len(l) == 0 {
			if d := time.Since(t0); d > 3*time.Second {
				t.Errorf("namespace %s removed %s after the force delete, want about 2 s", ns, d)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("namespace %s still there 10 s after the force delete (grace was 60 s)", ns)
}

func TestExitedContainerIsRestartedWithBackoff(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("crashy-7", "exit-3")
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// First restart is immediate, the next waits 10 s: CrashLoopBackOff
	// with restartCount 1 and the last exit recorded.
	p := waitPod(t, client, pod.Name, 20*time.Second, "in CrashLoopBackOff", func(p *v1.Pod, _ watch.EventType) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CrashLoopBackOff"
	})
	cs := p.Status.ContainerStatuses[0]
	if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
		t.Errorf("restartCount %d last state %+v, want 1 and exit 3", cs.RestartCount, cs.LastTerminationState)
	}
	if p.Status.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running (restartPolicy Always)", p.Status.Phase)
	}
}

func TestInitContainersRunFirst(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("inity-8")
	pod.Spec.InitContainers = []v1.Container{initOf(pod, "init", "exit-0")}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	ics := p.Status.InitContainerStatuses
	if len(ics) != 1 || ics[0].State.Terminated == nil || ics[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("init container status %+v, want terminated with 0", ics)
	}
	if !ics[0].State.Terminated.FinishedAt.Time.After(time.Time{}) || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("app not running after init: %+v", p.Status.ContainerStatuses)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodInitialized && c.Status != v1.ConditionTrue {
			t.Errorf("Initialized = %s", c.Status)
		}
	}
}

func TestCompletedPodReleasesNetworkAndIsDeletedOnRequest(t *testing.T) {
	client, cfg := startTestAgent(t)
	pod := testPod("done-9", "exit-3")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Containers[0].ReadinessProbe = nil
	pod.Spec.Containers[0].Lifecycle = nil
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, client, pod.Name, 30*time.Second, "Failed", func(p *v1.Pod, _ watch.EventType) bool { return p.Status.Phase == v1.PodFailed })
	if cs := p.Status.ContainerStatuses[0]; cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 || cs.RestartCount != 0 {
		t.Fatalf("container status %+v, want exited 3, never restarted", cs)
	}
	releasedThenDeleted(t, client, cfg, pod.Name)
}

func TestLivenessFailureRestartsAndStartupGatesReadiness(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("alive-10")
	c := &pod.Spec.Containers[0]
	c.Lifecycle = nil
	// Startup succeeds on the app's /healthz; liveness then probes a path
	// the app does not serve (404) and kills it after 2 failures.
	c.StartupProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, FailureThreshold: 10}
	c.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/missing", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, FailureThreshold: 2, TerminationGracePeriodSeconds: ptr.To(int64(1))}
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	if cs := p.Status.ContainerStatuses[0]; cs.Started == nil || !*cs.Started {
		t.Errorf("Ready but not started: %+v", cs)
	}
	p = waitPod(t, client, pod.Name, 30*time.Second, "restarted after liveness failures", func(p *v1.Pod, _ watch.EventType) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
	})
	last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
	// The app exits 0 at SIGTERM: the liveness kill ran the normal stop.
	if last == nil || last.ExitCode != 0 {
		t.Errorf("last termination %+v, want the SIGTERM exit (0)", last)
	}
}

func TestReadinessFollowsTheProbeWhileTerminating(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("drain-11", "ignore-term", "unready-on-term")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(4))
	pod.Spec.Containers[0].Lifecycle = nil
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	t0 := deleteGracefully(t, client, pod.Name).t0
	p := waitPod(t, client, pod.Name, 10*time.Second, "not Ready", func(p *v1.Pod, _ watch.EventType) bool { return !podReady(p) })
	d := time.Since(t0)
	// The app answers 503 from SIGTERM on; with periodSeconds 1 and
	// failureThreshold 1 the next probe (≤ 1 s later) flips Ready, while
	// the container still runs (it ignores SIGTERM; SIGKILL at 4 s).
	if d > 2*time.Second {
		t.Errorf("Ready turned false %s after the delete, want within the 1 s probe period (+1 s margin)", d)
	}
	if cs := p.Status.ContainerStatuses[0]; cs.State.Running == nil {
		t.Errorf("container not running when Ready turned false: %+v", cs.State)
	}
}
