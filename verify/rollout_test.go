package verify

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	testclock "k8s.io/utils/clock/testing"

	"github.com/epwindow/epwindow/measure/load"
)

// fakeLoad is a load generator's record: failures by scheduled instant,
// each known only once its request finished, finish after that instant (a
// refused connect takes about a round trip; a request to a vanished
// address much longer). It reads the fake clock, so a rollout that stops
// waiting early does not see the late ones.
type fakeLoad struct {
	clk    *testclock.FakeClock
	finish time.Duration

	mu        sync.Mutex
	failures  []load.Failure
	keptSince time.Time
	settled   []time.Time
}

func (f *fakeLoad) Totals() load.Totals {
	f.mu.Lock()
	defer f.mu.Unlock()
	return load.Totals{FailuresKeptSince: f.keptSince}
}

func (f *fakeLoad) Settle(_ context.Context, t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, t)
	return nil
}

func (f *fakeLoad) FailureEvents(from, to time.Time) []load.Failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clk.Now()
	var out []load.Failure
	for _, e := range f.failures {
		if !e.At.Before(from) && e.At.Before(to) && !e.At.Add(f.finish).After(now) {
			out = append(out, e)
		}
	}
	return out
}

const (
	testNS   = "team"
	testName = "web"
)

func testPod(name string, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID(name)},
		Status: corev1.PodStatus{PodIP: "10.244.0.9", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if deleting {
		ts := metav1.NewTime(t0)
		p.DeletionTimestamp = &ts
	}
	return p
}

// rolloutScene is one restart of a 2-replica Deployment with one old pod
// that is deleted at deleteAt and gone at goneAt (on the fake clock); the
// Deployment's status says complete from deleteAt (the ReplicaSet
// controller deletes the old pod before the status counts it out).
type rolloutScene struct {
	clk      *testclock.FakeClock
	client   *fake.Clientset
	tr       *tracker
	load     *fakeLoad
	tg       *target
	r        *runner
	deleteAt time.Time
	goneAt   time.Time
}

func newRolloutScene(t *testing.T, tail time.Duration) *rolloutScene {
	t.Helper()
	two := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testName, Generation: 1},
		Spec:   appsv1.DeploymentSpec{Replicas: &two},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 2, AvailableReplicas: 2}}
	clk := testclock.NewFakeClock(t0)
	client := fake.NewSimpleClientset(d)
	tr := newTracker(client, clk, testNS, labels.Everything())
	tr.onPod(t0, testPod("old-1", false), false)
	fl := &fakeLoad{clk: clk, finish: 50 * time.Millisecond}
	s := &rolloutScene{clk: clk, client: client, tr: tr, load: fl,
		tg:       &target{ns: testNS, name: testName, track: tr, gen: fl, lag: 3 * time.Second, tail: tail, res: 100 * time.Millisecond, from: t0},
		r:        &runner{cfg: Config{Client: client, Timeout: time.Minute, MaxFailures: 0}, clk: clk, progress: func(string) {}},
		deleteAt: t0.Add(500 * time.Millisecond), goneAt: t0.Add(time.Second)}
	return s
}

// run runs the rollout, stepping the fake clock by 10 ms whenever the
// rollout waits, and plays the old pod's deletion and removal.
func (s *rolloutScene) run(t *testing.T) Rollout {
	t.Helper()
	type result struct {
		ro  Rollout
		err error
	}
	done := make(chan result, 1)
	go func() {
		ro, err := s.r.rollout(context.Background(), s.tg, 1, func() {})
		done <- result{ro, err}
	}()
	deleted, gone := false, false
	for {
		select {
		case res := <-done:
			if res.err != nil {
				t.Fatalf("rollout: %v", res.err)
			}
			return res.ro
		default:
		}
		if !s.clk.HasWaiters() {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		now := s.clk.Now()
		if !deleted && !now.Before(s.deleteAt) {
			deleted = true
			s.tr.onPod(now, testPod("old-1", true), false)
			d, err := s.client.AppsV1().Deployments(testNS).Get(context.Background(), testName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d.Status.Replicas = 2
			if _, err := s.client.AppsV1().Deployments(testNS).UpdateStatus(context.Background(), d, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if !gone && !now.Before(s.goneAt) {
			gone = true
			s.tr.onPod(s.goneAt, testPod("old-1", true), true)
		}
		s.clk.Step(10 * time.Millisecond)
	}
}

// TestRolloutTail: failures scheduled in the tail after the last replaced
// pod is gone belong to the rollout and fail the gate, however long the
// tail; one scheduled after the tail does not.
func TestRolloutTail(t *testing.T) {
	for _, tail := range []time.Duration{minTail, 5 * time.Second} {
		t.Run(tail.String(), func(t *testing.T) {
			s := newRolloutScene(t, tail)
			end := s.goneAt.Add(tail)
			s.load.failures = []load.Failure{
				{At: end.Add(-100 * time.Millisecond), Kind: load.KindRefused},
				{At: end.Add(100 * time.Millisecond), Kind: load.KindTimeout},
			}
			ro := s.run(t)
			if !ro.Complete {
				t.Fatalf("rollout not complete: %s", ro.Condition)
			}
			if got := ro.Outcomes.Failed; len(got) != 1 || got[load.KindRefused] != 1 {
				t.Errorf("failures %v, want only the refused one at tail − 100 ms", got)
			}
			if len(s.load.settled) != 1 || !s.load.settled[0].Equal(end) {
				t.Errorf("settled %v, want once, at the tail's end %s", s.load.settled, end.Sub(t0))
			}
			if ro.DrainedNS != int64(s.goneAt.Sub(ro.Started)) {
				t.Errorf("drained %s, want %s", time.Duration(ro.DrainedNS), s.goneAt.Sub(ro.Started))
			}
			if !s.tg.from.Equal(end) {
				t.Errorf("next rollout's failures from %s, want the tail's end %s", s.tg.from.Sub(t0), end.Sub(t0))
			}
			rep := &Report{MaxFailures: 0, Rollouts: []Rollout{ro}}
			if v := decide(rep, 1); v.Pass || !strings.Contains(strings.Join(v.Reasons, "\n"), "1 failed requests") {
				t.Errorf("verdict %+v, want the gate failed by the one failure", v)
			}
		})
	}
}

// TestTiming: failures are collected after the last replaced pod is gone
// for as long as attribution takes an ingress to route to a vanished
// address (the lag), and at least minTail: with no window known the lag is
// defaultLag, and a tail shorter than it would leave the late failures of a
// rollout to the next one, or to none.
func TestTiming(t *testing.T) {
	for _, tc := range []struct {
		window, lag, tail time.Duration
	}{
		{0, defaultLag, defaultLag},
		{500 * time.Millisecond, 500 * time.Millisecond, minTail},
		{minTail, minTail, minTail},
		{8 * time.Second, 8 * time.Second, 8 * time.Second},
	} {
		t.Run(tc.window.String(), func(t *testing.T) {
			lag, tail := timing(tc.window)
			if lag != tc.lag || tail != tc.tail {
				t.Errorf("timing(%s) = lag %s, tail %s; want lag %s, tail %s", tc.window, lag, tail, tc.lag, tc.tail)
			}
		})
	}
}

// TestRolloutHistoryLost: a failure history that forgot failures of the
// rollout's window fails the run, saying why.
func TestRolloutHistoryLost(t *testing.T) {
	s := newRolloutScene(t, minTail)
	s.load.keptSince = t0.Add(300 * time.Millisecond)
	done := make(chan error, 1)
	go func() { _, err := s.r.rollout(context.Background(), s.tg, 1, func() {}); done <- err }()
	deleted := false
	for {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "lost failures") {
				t.Fatalf("rollout error %v, want the lost failures named", err)
			}
			return
		default:
		}
		if !s.clk.HasWaiters() {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if now := s.clk.Now(); !deleted && !now.Before(s.deleteAt) {
			deleted = true
			s.tr.onPod(now, testPod("old-1", true), true)
			d, _ := s.client.AppsV1().Deployments(testNS).Get(context.Background(), testName, metav1.GetOptions{})
			d.Status.Replicas = 2
			if _, err := s.client.AppsV1().Deployments(testNS).UpdateStatus(context.Background(), d, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		s.clk.Step(10 * time.Millisecond)
	}
}

// TestCollectWindows: consecutive rollouts' windows [from, end) meet, so a
// failure counts in exactly one rollout, by its scheduled instant.
func TestCollectWindows(t *testing.T) {
	clk := testclock.NewFakeClock(t0.Add(time.Hour))
	fl := &fakeLoad{clk: clk, failures: []load.Failure{
		{At: at(999), Kind: "status_502"}, {At: at(1000), Kind: load.KindRefused},
		{At: at(1999), Kind: load.KindReset}, {At: at(2000), Kind: load.KindTimeout},
	}}
	tr := newTracker(fake.NewSimpleClientset(), clk, testNS, labels.Everything())
	r := &runner{clk: clk}
	tg := &target{track: tr, gen: fl}
	var first, second Rollout
	r.collect(&first, tg, nil, at(0), at(1000), 0)
	r.collect(&second, tg, nil, at(1000), at(2000), 0)
	if f := first.Outcomes.Failed; len(f) != 1 || f["status_502"] != 1 {
		t.Errorf("first rollout [0, 1000 ms): %v, want the 502 at 999 ms", f)
	}
	if f := second.Outcomes.Failed; len(f) != 2 || f[load.KindRefused] != 1 || f[load.KindReset] != 1 {
		t.Errorf("second rollout [1000, 2000 ms): %v, want the refused at 1000 ms and the reset at 1999 ms", f)
	}
	if len(second.Failures) != 2 || second.Failures[0].AtNS != 0 {
		t.Errorf("second rollout's failures %+v, want 2, the first at its start", second.Failures)
	}
}

// TestPodExits: the replaced pod's exits include init and native sidecar
// containers and a container's termination before a restart; 137 and
// OOMKilled fail the gate always, 143 and other non-zero exits unless
// allowed.
func TestPodExits(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	term := func(code int32, reason string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
		Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: &always}}},
		Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "setup", State: term(0, "Completed")},
				{Name: "proxy", State: term(143, "Error")},
			},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", State: term(0, "Completed"), LastTerminationState: term(137, "OOMKilled")},
			},
		}}
	got := podExits(p)
	want := []PodExit{
		{Pod: "web-1", Container: "setup", Kind: ContainerInit, ExitCode: 0, Reason: "Completed"},
		{Pod: "web-1", Container: "proxy", Kind: ContainerSidecar, ExitCode: 143, Reason: "Error"},
		{Pod: "web-1", Container: "app", Previous: true, ExitCode: 137, Reason: "OOMKilled"},
		{Pod: "web-1", Container: "app", ExitCode: 0, Reason: "Completed"},
	}
	if len(got) != len(want) {
		t.Fatalf("exits %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("exit %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	ro := Rollout{N: 1, Complete: true, Exits: got}
	reasons := exitReasons(ro, nil)
	if len(reasons) != 2 || !strings.Contains(reasons[0], "proxy (sidecar): 143") || !strings.Contains(reasons[0], "--allow-exit-codes 143") ||
		!strings.Contains(reasons[1], "app: 137 before a restart") {
		t.Errorf("reasons %q, want the sidecar's 143 and the app's earlier OOM kill", reasons)
	}
	if reasons := exitReasons(ro, []int32{143}); len(reasons) != 1 || !strings.Contains(reasons[0], "137") {
		t.Errorf("with 143 allowed: %q, want only the 137", reasons)
	}
}

func TestParseExitCodes(t *testing.T) {
	if got, err := ParseExitCodes("143, 1"); err != nil || len(got) != 2 || got[0] != 143 || got[1] != 1 {
		t.Errorf("ParseExitCodes = %v, %v", got, err)
	}
	for _, bad := range []string{"x", "0", "256", "-1"} {
		if _, err := ParseExitCodes(bad); err == nil || !strings.Contains(err.Error(), "--allow-exit-codes") {
			t.Errorf("ParseExitCodes(%q) = %v, want an error naming the flag", bad, err)
		}
	}
	cfg := Config{AllowExitCodes: []int32{137}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "137") {
		t.Errorf("--allow-exit-codes 137: %v, want refused", err)
	}
}

// TestWatchTemplateChange: --watch follows a change of the pod template,
// not a scale (an HPA bumps the generation too); a rollout already in
// progress when verify started is followed at once.
func TestWatchTemplateChange(t *testing.T) {
	two := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testName, Generation: 1},
		Spec:   appsv1.DeploymentSpec{Replicas: &two},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}}
	clk := testclock.NewFakeClock(t0)
	client := fake.NewSimpleClientset(d)
	r := &runner{cfg: Config{Client: client, Timeout: time.Minute}, clk: clk, progress: func(string) {}}
	tg := &target{ns: testNS, name: testName, watch: newWatchState(d)}
	if tg.watch.inProgress {
		t.Fatal("a settled Deployment reads as a rollout in progress")
	}
	done := make(chan error, 1)
	go func() {
		done <- r.waitTemplateChange(context.Background(), client.AppsV1().Deployments(testNS), tg, 1, t0.Add(time.Minute))
	}()
	update := func(edit func(*appsv1.Deployment)) {
		cur, err := client.AppsV1().Deployments(testNS).Get(context.Background(), testName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit(cur)
		cur.Generation++
		if _, err := client.AppsV1().Deployments(testNS).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	step := func() {
		for !clk.HasWaiters() {
			select {
			case err := <-done:
				t.Fatalf("returned early: %v", err)
			default:
				time.Sleep(100 * time.Microsecond)
			}
		}
		clk.Step(pollEvery)
	}
	step()
	update(func(d *appsv1.Deployment) { three := int32(3); d.Spec.Replicas = &three }) // a scale
	step()
	step()
	select {
	case err := <-done:
		t.Fatalf("a scale was taken for a rollout (err %v)", err)
	default:
	}
	if tg.watch.gen != 2 {
		t.Errorf("the scale's generation %d not remembered", tg.watch.gen)
	}
	update(func(d *appsv1.Deployment) {
		d.Spec.Template.Annotations = map[string]string{RestartAnnotation: "now"}
	})
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if tg.watch.gen != 3 {
				t.Errorf("generation %d, want 3", tg.watch.gen)
			}
			// In progress at start: old pods of another template remain.
			d.Status.UpdatedReplicas = 1
			if w := newWatchState(d); !w.inProgress {
				t.Error("a Deployment with old-template pods left does not read as a rollout in progress")
			}
			return
		default:
		}
		if clk.HasWaiters() {
			clk.Step(pollEvery)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestRolloutTimeoutStopsLoop: a rollout that does not complete within
// --timeout ends the run: no further restart is sent.
func TestRolloutTimeoutStopsLoop(t *testing.T) {
	s := newRolloutScene(t, minTail)
	s.r.cfg.Timeout = 2 * time.Second
	s.r.cfg.Rollouts = 3
	rep := &Report{}
	done := make(chan error, 1)
	go func() { done <- s.r.verify(context.Background(), &teamTarget{target: s.tg}, rep) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			patches := 0
			for _, a := range s.client.Actions() {
				if a.GetVerb() == "patch" {
					patches++
				}
			}
			if patches != 1 || len(rep.Rollouts) != 1 || rep.Rollouts[0].Complete {
				t.Fatalf("%d restarts, rollouts %+v; want one, not complete", patches, rep.Rollouts)
			}
			if !strings.Contains(rep.Rollouts[0].Condition, "not complete after --timeout 2s") ||
				!strings.Contains(strings.Join(rep.Notes, "\n"), "no further rollout was started") {
				t.Errorf("condition %q, notes %q", rep.Rollouts[0].Condition, rep.Notes)
			}
			if v := decide(rep, 3); v.Pass || !strings.Contains(strings.Join(v.Reasons, "\n"), "1 of 3 rollouts ran") {
				t.Errorf("verdict %+v", v)
			}
			return
		default:
		}
		if s.clk.HasWaiters() {
			s.clk.Step(10 * time.Millisecond)
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
}
