package verify

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	testclock "k8s.io/utils/clock/testing"
)

// watchScene is a 2-replica Deployment (maxSurge 1, maxUnavailable 0) of
// template "a", settled, with pods a-1 and a-2 of its ReplicaSet, followed
// by --watch while the test plays rollouts started elsewhere on the fake
// clock: each template's ReplicaSet is named web-<template>, its
// pod-template-hash the template's name.
type watchScene struct {
	t      *testing.T
	clk    *testclock.FakeClock
	client *fake.Clientset
	tr     *tracker
	tg     *target
	r      *runner
	d      *appsv1.Deployment
}

var webLabels = map[string]string{"app": "web"}

func watchTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: webLabels, Annotations: map[string]string{RestartAnnotation: name}}}
}

func newWatchScene(t *testing.T, rollouts int) *watchScene {
	t.Helper()
	two := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testName, UID: "deploy-web", Generation: 1},
		Spec:   appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: webLabels}, Template: watchTemplate("a")},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, ReadyReplicas: 2}}
	clk := testclock.NewFakeClock(t0)
	client := fake.NewSimpleClientset(d)
	tr := newTracker(client, clk, testNS, labels.SelectorFromSet(webLabels))
	fl := &fakeLoad{clk: clk, finish: 50 * time.Millisecond}
	s := &watchScene{t: t, clk: clk, client: client, tr: tr, d: d,
		tg: &target{ns: testNS, name: testName, track: tr, gen: fl, lag: 3 * time.Second, tail: minTail, res: 100 * time.Millisecond,
			from: t0, watch: newWatchState(d)},
		r: &runner{cfg: Config{Client: client, Timeout: 20 * time.Second, Rollouts: rollouts, Watch: true}, clk: clk, progress: func(string) {}}}
	s.replicaSet("a")
	s.pod("a-1", "a", true, false)
	s.pod("a-2", "a", true, false)
	return s
}

// replicaSet creates template tmpl's ReplicaSet, controlled by the
// Deployment, as the Deployment controller does.
func (s *watchScene) replicaSet(tmpl string) {
	s.t.Helper()
	template := watchTemplate(tmpl)
	template.Labels = map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: tmpl}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testName + "-" + tmpl, Labels: template.Labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s.d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Template: template}}
	if _, err := s.client.AppsV1().ReplicaSets(testNS).Create(context.Background(), rs, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// pod plays one watch event of pod name of template tmpl at the clock's
// now: ready, deleting (a deletionTimestamp), or gone (the DELETED event).
func (s *watchScene) pod(name, tmpl string, ready, deleting bool) {
	p := podOf(name, tmpl)
	p.Status.PodIP = "10.244.0.9"
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	if deleting {
		ts := metav1.NewTime(s.clk.Now())
		p.DeletionTimestamp = &ts
	}
	s.tr.onPod(s.clk.Now(), p, false)
}

func (s *watchScene) gone(name, tmpl string) {
	s.tr.onPod(s.clk.Now(), podOf(name, tmpl), true)
}

// podOf is pod name of template tmpl's ReplicaSet, with no status.
func podOf(name, tmpl string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID(name),
		Labels: map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: tmpl}}}
}

// change sets the Deployment's pod template to tmpl (a new generation) and
// creates its ReplicaSet.
func (s *watchScene) change(tmpl string) {
	s.t.Helper()
	d, err := s.client.AppsV1().Deployments(testNS).Get(context.Background(), testName, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	d.Spec.Template = watchTemplate(tmpl)
	d.Generation++
	if _, err := s.client.AppsV1().Deployments(testNS).Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.replicaSet(tmpl)
}

// status sets the Deployment's status: the controller has observed the
// latest generation, with replicas pods of which updated are of the new
// template.
func (s *watchScene) status(replicas, updated int32) {
	s.t.Helper()
	d, err := s.client.AppsV1().Deployments(testNS).Get(context.Background(), testName, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: min(replicas, 2), ReadyReplicas: min(replicas, 2)}
	if _, err := s.client.AppsV1().Deployments(testNS).UpdateStatus(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// step is something the cluster does at ms after t0.
type step struct {
	ms int
	do func()
}

// run runs verify's rollouts (cfg.Rollouts, --watch) while it plays steps:
// each is played once the clock reached its instant and verify waits (so
// never in the middle of a poll), then the clock moves 10 ms.
func (s *watchScene) run(steps []step) *Report {
	s.t.Helper()
	rep := &Report{}
	done := make(chan error, 1)
	go func() { done <- s.r.verify(context.Background(), &teamTarget{target: s.tg}, rep) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				s.t.Fatalf("verify: %v", err)
			}
			return rep
		default:
		}
		if !s.clk.HasWaiters() {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		for len(steps) > 0 && !s.clk.Now().Before(at(steps[0].ms)) {
			steps[0].do()
			steps = steps[1:]
		}
		s.clk.Step(10 * time.Millisecond)
	}
}

// complete checks that rollout ro completed, was noticed at startedMS and
// drained at the last replaced pod's removal, goneMS.
func complete(t *testing.T, ro Rollout, startedMS, goneMS int) {
	t.Helper()
	if !ro.Complete || ro.Condition != "" {
		t.Fatalf("rollout %d: complete %v, condition %q; want complete", ro.N, ro.Complete, ro.Condition)
	}
	if !ro.Started.Equal(at(startedMS)) {
		t.Errorf("rollout %d started at %s, want %s (the first poll after the change)", ro.N, ro.Started.Sub(t0), at(startedMS).Sub(t0))
	}
	if want := at(goneMS).Sub(at(startedMS)); time.Duration(ro.DrainedNS) != want {
		t.Errorf("rollout %d drained in %s, want %s (the last replaced pod gone)", ro.N, time.Duration(ro.DrainedNS), want)
	}
}

// TestWatchSurgeBetweenPolls: the new template's surge pod, created
// between the poll before the change and the poll that notices it, is not
// a replaced pod: the rollout ends when the old template's pods are gone,
// instead of waiting for the surge pod until --timeout.
func TestWatchSurgeBetweenPolls(t *testing.T) {
	s := newWatchScene(t, 1)
	// Polls are at 0, 250, 500 ms …: the change and its surge pod land
	// between the first two.
	rep := s.run([]step{
		{100, func() { s.change("b"); s.status(3, 1); s.pod("b-1", "b", false, false) }},
		{600, func() { s.pod("b-1", "b", true, false); s.pod("a-1", "a", true, true); s.pod("b-2", "b", false, false) }},
		{900, func() { s.gone("a-1", "a") }},
		{1200, func() { s.pod("b-2", "b", true, false); s.pod("a-2", "a", true, true); s.status(2, 2) }},
		{1500, func() { s.gone("a-2", "a") }},
	})
	if len(rep.Rollouts) != 1 {
		t.Fatalf("rollouts %+v, want 1", rep.Rollouts)
	}
	complete(t, rep.Rollouts[0], 250, 1500)
}

// TestWatchTwoTemplateChanges: two template changes within one rollout.
// Both between two polls: the second template's surge pod is not waited
// for. The second during the rollout: the rollout ends with the second
// template's pods in place, and the next rollout is the next change, not
// the second one again (whose pods it would then wait to be replaced).
func TestWatchTwoTemplateChanges(t *testing.T) {
	t.Run("both between two polls", func(t *testing.T) {
		s := newWatchScene(t, 1)
		rep := s.run([]step{
			{100, func() { s.change("b"); s.status(3, 1); s.pod("b-1", "b", false, false) }},
			// The controller scales b down at once and surges c.
			{150, func() { s.change("c"); s.status(3, 1); s.pod("b-1", "b", false, true); s.pod("c-1", "c", false, false) }},
			{400, func() { s.gone("b-1", "b") }},
			{600, func() { s.pod("c-1", "c", true, false); s.pod("a-1", "a", true, true); s.pod("c-2", "c", false, false) }},
			{900, func() { s.gone("a-1", "a") }},
			{1200, func() { s.pod("c-2", "c", true, false); s.pod("a-2", "a", true, true); s.status(2, 2) }},
			{1500, func() { s.gone("a-2", "a") }},
		})
		if len(rep.Rollouts) != 1 {
			t.Fatalf("rollouts %+v, want 1", rep.Rollouts)
		}
		complete(t, rep.Rollouts[0], 250, 1500)
	})
	t.Run("the second during the rollout, then another rollout", func(t *testing.T) {
		s := newWatchScene(t, 2)
		rep := s.run([]step{
			{100, func() { s.change("b"); s.status(3, 1); s.pod("b-1", "b", false, false) }},
			{400, func() { s.change("c"); s.status(3, 1); s.pod("b-1", "b", false, true); s.pod("c-1", "c", false, false) }},
			{600, func() { s.gone("b-1", "b") }},
			{700, func() { s.pod("c-1", "c", true, false); s.pod("a-1", "a", true, true); s.pod("c-2", "c", false, false) }},
			{900, func() { s.gone("a-1", "a") }},
			{1200, func() { s.pod("c-2", "c", true, false); s.pod("a-2", "a", true, true); s.status(2, 2) }},
			{1500, func() { s.gone("a-2", "a") }},
			// Rollout 1's tail ends at 3500 ms; rollout 2 polls from
			// there, at 5000 and 5250 ms.
			{5100, func() { s.change("d"); s.status(3, 1); s.pod("d-1", "d", false, false) }},
			{5400, func() { s.pod("d-1", "d", true, false); s.pod("c-1", "c", true, true); s.pod("d-2", "d", false, false) }},
			{5600, func() { s.gone("c-1", "c") }},
			{5900, func() { s.pod("d-2", "d", true, false); s.pod("c-2", "c", true, true); s.status(2, 2) }},
			{6200, func() { s.gone("c-2", "c") }},
		})
		if len(rep.Rollouts) != 2 {
			t.Fatalf("rollouts %+v, want 2", rep.Rollouts)
		}
		complete(t, rep.Rollouts[0], 250, 1500)
		complete(t, rep.Rollouts[1], 5250, 6200)
	})
}

// TestNewReplicaSetHash: the new ReplicaSet is the one the Deployment
// controls whose template is the Deployment's but for pod-template-hash;
// another Deployment's ReplicaSet of the same template is not it.
func TestNewReplicaSetHash(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testName, UID: "deploy-web"},
		Spec: appsv1.DeploymentSpec{Template: watchTemplate("b")}}
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "other", UID: "deploy-other"}}
	rs := func(owner *appsv1.Deployment, tmpl, hash string) appsv1.ReplicaSet {
		template := watchTemplate(tmpl)
		template.Labels = map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: hash}
		return appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: hash,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
			Spec: appsv1.ReplicaSetSpec{Template: template}}
	}
	for _, tc := range []struct {
		name string
		rss  []appsv1.ReplicaSet
		want string
	}{
		{"found among the old", []appsv1.ReplicaSet{rs(d, "a", "hash-a"), rs(d, "b", "hash-b")}, "hash-b"},
		{"another Deployment's", []appsv1.ReplicaSet{rs(other, "b", "hash-x"), rs(d, "b", "hash-b")}, "hash-b"},
		{"not made yet", []appsv1.ReplicaSet{rs(d, "a", "hash-a")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := newReplicaSetHash(d, tc.rss)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("newReplicaSetHash = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// exited plays the deleting pod name's status with its container
// terminated with code, Ready or not.
func (s *watchScene) exited(name, tmpl string, ready bool, code int32) {
	p := podOf(name, tmpl)
	p.Status = corev1.PodStatus{PodIP: "10.244.0.9", ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}}}}}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	ts := metav1.NewTime(s.clk.Now())
	p.DeletionTimestamp = &ts
	s.tr.onPod(s.clk.Now(), p, false)
}

// TestWatchNeverReadyExit: a pod of a template replaced while it started
// (two template changes in one rollout) is stopped before its process
// handles SIGTERM and exits 143. It was never Ready, so no Service routed
// to it: its exit is reported but does not fail the gate. The same exit of
// a replaced pod that was Ready does.
func TestWatchNeverReadyExit(t *testing.T) {
	s := newWatchScene(t, 1)
	rep := s.run([]step{
		{100, func() { s.change("b"); s.status(3, 1); s.pod("b-1", "b", false, false) }},
		{400, func() { s.change("c"); s.status(3, 1); s.pod("b-1", "b", false, true); s.pod("c-1", "c", false, false) }},
		{500, func() { s.exited("b-1", "b", false, 143) }},
		{600, func() { s.gone("b-1", "b") }},
		{700, func() { s.pod("c-1", "c", true, false); s.pod("a-1", "a", true, true); s.pod("c-2", "c", false, false) }},
		{800, func() { s.exited("a-1", "a", false, 0) }},
		{900, func() { s.gone("a-1", "a") }},
		{1200, func() { s.pod("c-2", "c", true, false); s.pod("a-2", "a", true, true); s.status(2, 2) }},
		{1300, func() { s.exited("a-2", "a", false, 143) }},
		{1500, func() { s.gone("a-2", "a") }},
	})
	if len(rep.Rollouts) != 1 {
		t.Fatalf("rollouts %+v, want 1", rep.Rollouts)
	}
	ro := rep.Rollouts[0]
	var never, served []string
	for _, e := range ro.Exits {
		if e.NeverReady {
			never = append(never, e.Pod)
		} else {
			served = append(served, e.Pod)
		}
	}
	if len(never) != 1 || never[0] != "b-1" || len(served) != 2 {
		t.Errorf("exits %+v: want b-1's never Ready, a-1's and a-2's served", ro.Exits)
	}
	reasons := exitReasons(ro, nil)
	if len(reasons) != 1 || !strings.Contains(reasons[0], "a-2/app: 143") {
		t.Errorf("reasons %q: want a-2's 143 alone (b-1 was never Ready)", reasons)
	}
	// A pull-request comment says why b-1's 143 did not count.
	var md strings.Builder
	if err := Markdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "b-1/app: 143 (Error, SIGTERM) ("+neverReadyNote+")") {
		t.Errorf("markdown does not mark b-1's exit as not judged:\n%s", md.String())
	}
}
