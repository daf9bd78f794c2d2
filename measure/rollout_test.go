package measure

import (
	"context"
	"net/netip"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/epwindow/epwindow/deploy"
)

const rolloutNS = "epwindow-abc123"

var rolloutSel = labels.Set{"app": "probe"}

func readyPod(name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: rolloutNS, Name: name, UID: types.UID(name + "-uid"), Labels: rolloutSel},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func probeSlice(ready map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: rolloutNS, Name: "probe-x", Labels: map[string]string{discoveryv1.LabelServiceName: "probe"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for ip, r := range ready {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(r), Serving: ptrTo(r), Terminating: ptrTo(!r)}})
	}
	return s
}

// startWatcher runs a watcher on a fake clientset holding objs, stamping on
// clk, and waits for its first list.
func startWatcher(t *testing.T, clk *clocktesting.FakeClock, objs ...*corev1.Pod) (*watcher, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset()
	for _, p := range objs {
		if _, err := cs.CoreV1().Pods(rolloutNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := newWatcher(cs, clk, rolloutNS, labels.SelectorFromSet(rolloutSel), "probe")
	if err := w.start(ctx); err != nil {
		t.Fatal(err)
	}
	return w, cs
}

// waitFor waits for the watcher's next events until cond holds.
func waitFor(t *testing.T, w *watcher, what string, cond func() bool) {
	t.Helper()
	guard := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-w.changed:
		case <-guard:
			t.Fatalf("no %s within 10s", what)
		}
	}
}

// Rollout bookkeeping: with a follow rule set, the first sight of an old
// pod terminating begins a trial by itself, T0 being that sight on the
// tool's clock; a terminating pod the rule does not name (a new one) begins
// nothing; later slice and pod events land in the followed trial.
func TestFollowBeginsTrialsAtFirstSight(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	oldPod, newPod := readyPod("probe-old", "10.244.0.5"), readyPod("probe-new", "10.244.0.6")
	w, cs := startWatcher(t, clk, oldPod, newPod)
	ctx := context.Background()
	slices := cs.DiscoveryV1().EndpointSlices(rolloutNS)
	if _, err := slices.Create(ctx, probeSlice(map[string]bool{"10.244.0.5": true, "10.244.0.6": true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "slice in the cache", func() bool {
		l, _ := w.slices.EndpointSlices(rolloutNS).List(w.sliceSel)
		return len(l) == 1
	})
	w.setFollow(func(p *corev1.Pod) bool { return p.UID == oldPod.UID })

	terminate := func(p *corev1.Pod) {
		t.Helper()
		p = p.DeepCopy()
		p.DeletionTimestamp = &metav1.Time{Time: t0.Add(30 * time.Second)}
		p.DeletionGracePeriodSeconds = ptrTo(int64(30))
		if _, err := cs.CoreV1().Pods(rolloutNS).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sight := t0.Add(2 * time.Second)
	clk.SetTime(sight)
	terminate(newPod)
	terminate(oldPod)
	var got []*trialWatch
	waitFor(t, w, "followed trial", func() bool { got = append(got, w.takeFollowed()...); return len(got) > 0 })
	if len(got) != 1 || got[0].uid != oldPod.UID {
		t.Fatalf("followed %d trials (%+v), want only probe-old's", len(got), got)
	}
	tw := w.snapshot(oldPod.UID)
	if !tw.t0.Equal(sight) || !tw.terminatingSeen.Equal(sight) || tw.addr != netip.MustParseAddr("10.244.0.5") {
		t.Errorf("trial t0 %s, terminating seen %s, addr %s; want %s, %s, 10.244.0.5", tw.t0, tw.terminatingSeen, tw.addr, sight, sight)
	}
	if !tw.serverDeleteTime.Equal(t0) {
		t.Errorf("server delete time %s, want deletionTimestamp - grace = %s", tw.serverDeleteTime, t0)
	}

	notReady := t0.Add(2500 * time.Millisecond)
	clk.SetTime(notReady)
	if _, err := slices.Update(ctx, probeSlice(map[string]bool{"10.244.0.5": false, "10.244.0.6": false}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "slice not-ready stamp", func() bool { return !w.snapshot(oldPod.UID).sliceNotReady.IsZero() })
	gone := t0.Add(3 * time.Second)
	clk.SetTime(gone)
	if err := cs.CoreV1().Pods(rolloutNS).Delete(ctx, oldPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "pod deleted stamp", func() bool { return !w.snapshot(oldPod.UID).podDeleted.IsZero() })
	tw = w.end(oldPod.UID)
	if !tw.sliceNotReady.Equal(notReady) || !tw.podDeleted.Equal(gone) || tw.deletedOnRelist {
		t.Errorf("slice not ready %s, pod deleted %s (relist %v); want %s, %s, watch", tw.sliceNotReady, tw.podDeleted, tw.deletedOnRelist, notReady, gone)
	}
	if n := len(w.takeFollowed()); n != 0 {
		t.Errorf("%d more followed trials, want none (probe-new is not followed)", n)
	}
}

// steadyPods counts only pods that are Running, Ready, addressed and not
// terminating: what steady state waits for before each deletion.
func TestSteadyPodsExcludesTerminatingAndUnready(t *testing.T) {
	unready := readyPod("probe-unready", "10.244.0.7")
	unready.Status.Conditions[0].Status = corev1.ConditionFalse
	pending := readyPod("probe-pending", "")
	pending.Status.Phase = corev1.PodPending
	terminating := readyPod("probe-terminating", "10.244.0.8")
	terminating.DeletionTimestamp = &metav1.Time{Time: t0}
	w, _ := startWatcher(t, clocktesting.NewFakeClock(t0), readyPod("probe-ok", "10.244.0.5"), unready, pending, terminating)
	r := &runner{ns: rolloutNS, watch: w, wl: &deploy.Workload{Deployment: &appsv1.Deployment{
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: rolloutSel}}}}}
	if all, err := w.pods.Pods(rolloutNS).List(w.podSel); err != nil || len(all) != 4 {
		t.Fatalf("cache holds %d pods (%v), want 4", len(all), err)
	}
	pods, err := r.steadyPods()
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Name != "probe-ok" {
		var names []string
		for _, p := range pods {
			names = append(names, p.Name)
		}
		t.Errorf("steady pods %v, want [probe-ok]", names)
	}
}
