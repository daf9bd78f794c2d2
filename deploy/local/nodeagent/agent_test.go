package nodeagent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// startTestAgent runs a real agent (real namespaces, processes, CNI) for
// node tn0 against a fake API; the test binary is the shim and the app.
func startTestAgent(t testing.TB) (*fake.Clientset, Config) {
	t.Helper()
	return startTestAgentWith(t, nil)
}

// startTestAgentWith is startTestAgent with setup run on the fake API
// before the agent starts (reactors must be in place before anything uses
// the client).
func startTestAgentWith(t testing.TB, setup func(*fake.Clientset)) (*fake.Clientset, Config) {
	t.Helper()
	cfg := testNetConfig(t)
	cfg.Nodes = []string{"tn0"}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Containers run as 65532: the binary and its directory must be
	// readable by them, which the test binary's build dir is not.
	cfg.BinDir, err = os.MkdirTemp("", "epwt-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(cfg.BinDir) })
	if err := os.Chmod(cfg.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.BinDir, "testapp"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	if setup != nil {
		setup(client)
	}
	cfg.Client = client
	cfg.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	ag, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		select {
		case err := <-ag.Err():
			t.Errorf("agent stopped during the test: %v", err)
		default:
		}
		if err := ag.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if l := leftovers(t, cfg); len(l) > 0 {
			t.Errorf("left behind: %v", l)
		}
	})
	return client, cfg
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func testPod(name string, args ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("a1b2c3d4-0000-4000-8000-" + name[len(name)-1:] + "00000000000")},
		Spec: v1.PodSpec{
			NodeName:                      "tn0",
			RestartPolicy:                 v1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To(int64(3)),
			Containers: []v1.Container{{
				Name:    "app",
				Image:   "local/testapp",
				Command: []string{"/bin/testapp", testAppArg},
				Args:    args,
				Ports:   []v1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env: []v1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "NODE_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
					{Name: "WHO", Value: "world"},
					{Name: "GREETING", Value: "hello $(WHO)"},
				},
				ReadinessProbe: &v1.Probe{
					ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
					PeriodSeconds: 1, FailureThreshold: 1,
				},
				Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{
					HTTPGet: &v1.HTTPGetAction{Path: "/prestop", Port: intstr.FromInt32(8080)},
				}},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: v1.TerminationMessageReadFile,
				SecurityContext: &v1.SecurityContext{
					RunAsUser:              ptr.To(int64(65532)),
					RunAsGroup:             ptr.To(int64(65532)),
					ReadOnlyRootFilesystem: ptr.To(true),
				},
			}},
		},
	}
}

// waitPod watches the pod until cond holds, or fails after timeout. The
// current object is checked first, so conditions on state never miss.
func waitPod(t testing.TB, client *fake.Clientset, name string, timeout time.Duration, what string, cond func(*v1.Pod, watch.EventType) bool) *v1.Pod {
	t.Helper()
	w, err := client.CoreV1().Pods("default").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if p, err := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); err == nil && cond(p, watch.Modified) {
		return p
	}
	return waitEvents(t, client, w, name, timeout, what, cond)
}

// waitEvents reads w until cond holds for an event of the pod.
func waitEvents(t testing.TB, client *fake.Clientset, w watch.Interface, name string, timeout time.Duration, what string, cond func(*v1.Pod, watch.EventType) bool) *v1.Pod {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*v1.Pod)
			if ok && p.Name == name && cond(p, ev.Type) {
				return p
			}
		case <-deadline:
			p, _ := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
			t.Fatalf("pod %s: not %s after %s; last: %+v", name, what, timeout, p)
		}
	}
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// deletion is a graceful delete in progress: when it began, and a watch
// started before it, so that no event of the termination is missed.
type deletion struct {
	t0     time.Time
	w      watch.Interface
	client *fake.Clientset
	name   string
}

// deleteGracefully does what the API server does on DELETE with a grace
// period: it sets deletionTimestamp and deletionGracePeriodSeconds.
func deleteGracefully(t testing.TB, client *fake.Clientset, name string) deletion {
	t.Helper()
	p, err := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := client.CoreV1().Pods("default").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	t0 := time.Now()
	g := *p.Spec.TerminationGracePeriodSeconds
	p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(time.Duration(g) * time.Second)))
	p.DeletionGracePeriodSeconds = &g
	if _, err := client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return deletion{t0: t0, w: w, client: client, name: name}
}

// wait reads the deletion's events until cond holds.
func (d deletion) wait(t testing.TB, timeout time.Duration, what string, cond func(*v1.Pod, watch.EventType) bool) *v1.Pod {
	t.Helper()
	return waitEvents(t, d.client, d.w, d.name, timeout, what, cond)
}

// lastStatus waits for the agent's DELETE of the pod and returns the
// object as it was just before (nil if no update came first).
func (d deletion) lastStatus(t testing.TB, timeout time.Duration) *v1.Pod {
	t.Helper()
	var final *v1.Pod
	d.wait(t, timeout, "deleted by the agent", func(p *v1.Pod, ev watch.EventType) bool {
		if ev == watch.Deleted {
			return true
		}
		final = p
		return false
	})
	return final
}

// releasedThenDeleted checks that a finished pod's network namespace goes
// (the kubelet kills the sandbox of a pod that is done) and that the agent
// removes the object once it is deleted.
func releasedThenDeleted(t testing.TB, client *fake.Clientset, cfg Config, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l, _ := listNetns(cfg.Prefix); len(l) > 0; l, _ = listNetns(cfg.Prefix) {
		if time.Now().After(deadline) {
			t.Fatalf("network namespaces %v still there 10 s after the pod finished", l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	del := deleteGracefully(t, client, name)
	del.wait(t, 10*time.Second, "deleted by the agent", func(_ *v1.Pod, ev watch.EventType) bool { return ev == watch.Deleted })
}

// initOf is the pod's app container as a plain init container running args.
func initOf(pod *v1.Pod, name string, args ...string) v1.Container {
	c := *pod.Spec.Containers[0].DeepCopy()
	c.Name, c.Args = name, args
	c.ReadinessProbe, c.Lifecycle, c.Ports = nil, nil, nil
	return c
}

func TestPodRunsAndTerminatesLikeKubelet(t *testing.T) {
	client, cfg := startTestAgent(t)
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), testPod("web-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, client, "web-1", 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil || !netip.MustParsePrefix("10.247.0.0/24").Contains(ip) {
		t.Fatalf("podIP %q not in node tn0's subnet", p.Status.PodIP)
	}
	if len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != p.Status.PodIP || p.Status.HostIP != "127.0.0.1" || p.Status.Phase != v1.PodRunning {
		t.Fatalf("status: podIPs %v hostIP %q phase %s", p.Status.PodIPs, p.Status.HostIP, p.Status.Phase)
	}
	// The app, reached from the root namespace at the pod address.
	resp, err := http.Get("http://" + p.Status.PodIP + ":8080/report")
	if err != nil {
		t.Fatalf("GET /report from the pod: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep appReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report %q: %v", b, err)
	}
	want := map[string]string{"POD_NAME": "web-1", "POD_NAMESPACE": "default", "POD_IP": p.Status.PodIP, "NODE_NAME": "tn0", "GREETING": "hello world"}
	for k, v := range want {
		if rep.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, rep.Env[k], v)
		}
	}
	if rep.Hostname != "web-1" || rep.UID != 65532 || !rep.RootRO {
		t.Errorf("container sees hostname %q uid %d read-only root %v, want web-1, 65532, true", rep.Hostname, rep.UID, rep.RootRO)
	}

	del := deleteGracefully(t, client, "web-1")
	t0 := del.t0
	final := del.lastStatus(t, 20*time.Second)
	took := time.Since(t0)
	if final == nil || len(final.Status.ContainerStatuses) != 1 || final.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("last status before deletion has no terminated container: %+v", final)
	}
	term := final.Status.ContainerStatuses[0].State.Terminated
	if term.ExitCode != 0 || final.Status.Phase != v1.PodSucceeded {
		t.Errorf("exit code %d phase %s, want 0 and Succeeded (the app exits 0 on SIGTERM)", term.ExitCode, final.Status.Phase)
	}
	if err := json.Unmarshal([]byte(term.Message), &rep); err != nil {
		t.Fatalf("termination message %q: %v", term.Message, err)
	}
	if rep.PreStopNS == 0 || rep.SigtermNS == 0 || rep.PreStopNS > rep.SigtermNS {
		t.Errorf("preStop at %d, SIGTERM at %d: want the preStop hook before SIGTERM", rep.PreStopNS, rep.SigtermNS)
	}
	// The app exits right at SIGTERM: the whole termination takes far less
	// than the 3 s grace period.
	if took > 2*time.Second {
		t.Errorf("deletion took %s for an app that exits on SIGTERM", took)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, cfg.netnsName(string(p.UID)))); !os.IsNotExist(err) {
		t.Errorf("pod network namespace still exists after deletion (%v)", err)
	}
}

func TestSigtermIgnoredIsKilledAtGracePeriod(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("stubborn-2", "ignore-term")
	pod.Spec.Containers[0].Lifecycle = nil
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	del := deleteGracefully(t, client, pod.Name)
	t0 := del.t0
	var final *v1.Pod
	var notReadyAt time.Time
	del.wait(t, 20*time.Second, "deleted by the agent", func(p *v1.Pod, ev watch.EventType) bool {
		if ev == watch.Deleted {
			return true
		}
		final = p
		if notReadyAt.IsZero() && !podReady(p) {
			notReadyAt = time.Now()
		}
		return false
	})
	took := time.Since(t0)
	term := final.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 137 || final.Status.Phase != v1.PodFailed {
		t.Fatalf("final state %+v phase %s, want exit 137 and Failed", final.Status.ContainerStatuses[0].State, final.Status.Phase)
	}
	// SIGKILL comes 3 s (the grace period) after SIGTERM; the deletion
	// follows after CNI DEL and two API calls. The upper bound allows 1 s
	// for those on a loaded 2-core machine.
	if took < 3*time.Second || took > 4*time.Second {
		t.Errorf("deletion %s after the delete, want the 3 s grace period (+ < 1 s)", took)
	}
	// The app keeps answering its readiness probe after SIGTERM, so the pod
	// stays Ready until the container is killed.
	if d := notReadyAt.Sub(t0); d < 2*time.Second {
		t.Errorf("pod turned not-ready %s after the delete: readiness must follow the probe while terminating", d)
	}
}
