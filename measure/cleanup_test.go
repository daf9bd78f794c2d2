package measure

import (
	"context"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/probe"
)

// fakeProbes records the probes a runner released; the pod proxy it stands
// for is not in a fake clientset.
type fakeProbes struct {
	mu       sync.Mutex
	released []string
}

func (f *fakeProbes) timeline(context.Context, string) (*probe.Timeline, error) { return nil, nil }
func (f *fakeProbes) probeClock(context.Context, string) (time.Time, error)     { return time.Time{}, nil }
func (f *fakeProbes) release(_ context.Context, pod string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, pod)
	return nil
}

func (f *fakeProbes) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.released))
}

// cleanupRunner is a runner of run id "abc123" that rendered its workload in
// ns (its own namespace unless shared), on a fake clientset holding objs and
// two probe pods, and a fake clock.
func cleanupRunner(t *testing.T, ns string, shared bool, objs ...runtime.Object) (*runner, *fake.Clientset, *clocktesting.FakeClock, *fakeProbes) {
	t.Helper()
	name := "probe"
	clk := clocktesting.NewFakeClock(t0)
	cfg := Config{Trials: 1, Clock: clk}
	if shared {
		name, cfg.Namespace = "epwindow-abc123", ns
	}
	wl, err := deploy.Render(deploy.Params{Namespace: ns, Name: name, Replicas: 2,
		Image: deploy.DefaultImage, Hold: time.Minute, GraceMargin: 5 * time.Second, RunID: "abc123"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"probe-a", "probe-b"} {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n, UID: types.UID(n + "-uid"),
			Labels: wl.Deployment.Spec.Selector.MatchLabels}})
	}
	cs := fake.NewClientset(objs...)
	cfg.Client = cs
	probes := &fakeProbes{}
	r := &runner{cfg: cfg, ns: ns, runID: "abc123", wl: wl, probes: probes, progress: func(Progress) {}}
	return r, cs, clk, probes
}

// runCleanup runs r.cleanup, stepping the fake clock by cleanupPoll whenever
// cleanup waits on it, and returns its error and how often it waited.
func runCleanup(t *testing.T, r *runner, clk *clocktesting.FakeClock) (int, error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cleanup() }()
	steps := 0
	guard := time.After(20 * time.Second)
	for {
		select {
		case err := <-done:
			return steps, err
		case <-guard:
			t.Fatalf("cleanup still running after %d polls", steps)
		default:
		}
		if clk.HasWaiters() {
			clk.Step(cleanupPoll)
			steps++
		}
		goruntime.Gosched()
	}
}

func deletes(cs *fake.Clientset, resource string) []k8stesting.DeleteActionImpl {
	var out []k8stesting.DeleteActionImpl
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && a.GetResource().Resource == resource {
			out = append(out, d)
		}
	}
	return out
}

// The run's own namespace: cleanup releases and deletes the probes with a
// 1 s grace, deletes the namespace under its UID, and waits while it
// terminates (here: two more reads), polling on the injected clock.
func TestCleanupOwnNamespaceWaitsUntilGone(t *testing.T) {
	const ns = "epwindow-abc123"
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: "ns-uid",
		Labels: map[string]string{deploy.LabelManagedBy: deploy.ManagedByValue, deploy.LabelRunID: "abc123"}}}
	r, cs, clk, probes := cleanupRunner(t, ns, false, nsObj)
	terminating := 0
	cs.PrependReactor("delete", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		terminating = 3 // the namespace stays for three reads
		return true, nil, nil
	})
	cs.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		switch {
		case terminating == 0:
			return false, nil, nil // before the delete: the tracker's object
		case terminating > 1:
			terminating--
			return true, nsObj, nil
		}
		return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), ns)
	})
	steps, err := runCleanup(t, r, clk)
	if err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if steps != 2 {
		t.Errorf("cleanup polled %d times while the namespace terminated, want 2", steps)
	}
	if got, want := probes.names(), []string{"probe-a", "probe-b"}; !slices.Equal(got, want) {
		t.Errorf("released %v, want %v", got, want)
	}
	for _, d := range deletes(cs, "pods") {
		if g := d.DeleteOptions.GracePeriodSeconds; g == nil || *g != 1 {
			t.Errorf("pod %s deleted with grace %v, want 1s", d.Name, g)
		}
		if p := d.DeleteOptions.Preconditions; p == nil || p.UID == nil || *p.UID != types.UID(d.Name+"-uid") {
			t.Errorf("pod %s deleted without its UID precondition", d.Name)
		}
	}
	nsDel := deletes(cs, "namespaces")
	if len(nsDel) != 1 || nsDel[0].DeleteOptions.Preconditions == nil || *nsDel[0].DeleteOptions.Preconditions.UID != "ns-uid" {
		t.Errorf("namespace deletes %+v, want one under UID ns-uid", nsDel)
	}
}

// A namespace of that name that is not this run's (another run id) is left
// alone: nothing is deleted and the error says so.
func TestCleanupLeavesAnotherRunsNamespace(t *testing.T) {
	const ns = "epwindow-abc123"
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{deploy.LabelManagedBy: deploy.ManagedByValue, deploy.LabelRunID: "ffffff"}}}
	r, cs, clk, probes := cleanupRunner(t, ns, false, nsObj)
	_, err := runCleanup(t, r, clk)
	if err == nil || !strings.Contains(err.Error(), "not this run's") {
		t.Fatalf("cleanup = %v, want an error saying the namespace is not this run's", err)
	}
	for _, res := range []string{"namespaces", "pods", "deployments"} {
		if d := deletes(cs, res); len(d) != 0 {
			t.Errorf("deleted %d %s of another run", len(d), res)
		}
	}
	if n := len(probes.names()); n != 0 {
		t.Errorf("released %d probes of another run", n)
	}
}

// In a shared namespace (--namespace) cleanup deletes exactly the run's
// Deployment, Ingress and Service under the UIDs their creates returned,
// then releases pods pass after pass: a replacement the ReplicaSet made
// before the garbage collector removed it is released on the next pass.
func TestCleanupSharedNamespaceDeletesOnlyTheRunsObjects(t *testing.T) {
	const ns = "team-a"
	r, cs, clk, probes := cleanupRunner(t, ns, true)
	r.made = created{service: "svc-uid", deployment: "dep-uid", ingress: "ing-uid"}
	replaced := false
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !replaced {
			replaced = true
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe-c", UID: "probe-c-uid",
				Labels: r.wl.Deployment.Spec.Selector.MatchLabels}}
			if err := cs.Tracker().Add(p); err != nil {
				t.Error(err)
			}
		}
		return false, nil, nil
	})
	steps, err := runCleanup(t, r, clk)
	if err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if got, want := probes.names(), []string{"probe-a", "probe-b", "probe-c"}; !slices.Equal(got, want) {
		t.Errorf("released %v, want %v", got, want)
	}
	if steps != 2 {
		t.Errorf("cleanup polled %d times, want 2 (a pass for the replacement, one to see none left)", steps)
	}
	for res, uid := range map[string]types.UID{"deployments": "dep-uid", "services": "svc-uid", "ingresses": "ing-uid"} {
		d := deletes(cs, res)
		if len(d) != 1 || d[0].Name != "epwindow-abc123" || d[0].DeleteOptions.Preconditions == nil || *d[0].DeleteOptions.Preconditions.UID != uid {
			t.Errorf("%s deletes %+v, want one of epwindow-abc123 under UID %s", res, d, uid)
		}
	}
	if d := deletes(cs, "namespaces"); len(d) != 0 {
		t.Errorf("deleted the shared namespace")
	}
}

// With --dns in a shared namespace, the headless Service goes too, by its
// own name and the UID its create returned.
func TestCleanupSharedNamespaceDeletesTheHeadlessService(t *testing.T) {
	r, cs, clk, _ := cleanupRunner(t, "team-a", true)
	r.wl.Headless = r.wl.Service.DeepCopy()
	r.wl.Headless.Name = deploy.HeadlessName(r.wl.Service.Name)
	r.made = created{service: "svc-uid", deployment: "dep-uid", ingress: "ing-uid", headless: "hl-uid"}
	if _, err := runCleanup(t, r, clk); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	d := deletes(cs, "services")
	names := map[string]types.UID{}
	for _, x := range d {
		if x.DeleteOptions.Preconditions != nil {
			names[x.Name] = *x.DeleteOptions.Preconditions.UID
		}
	}
	if len(d) != 2 || names["epwindow-abc123"] != "svc-uid" || names["epwindow-abc123-headless"] != "hl-uid" {
		t.Errorf("service deletes %+v, want the Service and its headless twin under their UIDs", d)
	}
}
