package measure

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

// runnerStateAt is a runner whose clock runs offset ahead of the tool's,
// known within unc, that saw its last response from pod routed between
// sent and got (tool clock; the stats hold them on the runner's clock).
func runnerStateAt(name, node, ip, pod string, offset, unc time.Duration, sent, got time.Time) *runnerState {
	return &runnerState{pod: name, node: node, ip: ip, statsOK: true, skewOK: true,
		skew: load.Estimate{Offset: offset, Uncertainty: unc, Samples: 5},
		stats: load.Stats{Version: 1, Failures: map[string]int{"refused": 3, "timeout": 1},
			Pods: []load.PodReport{{Pod: pod, Responses: 40, LastSent: sent.Add(offset), Last: got.Add(offset)}}},
		before: map[string]int{"refused": 1, "timeout": 1}}
}

// cluster_last_routed is the runner's last response converted to the
// tool's clock with the runner's skew, its bound the skew bound plus the
// exchange's span; runners that cannot be trusted get a note, not a stage.
func TestClusterStages(t *testing.T) {
	ms := time.Millisecond
	last := t0.Add(1500 * ms)
	states := []*runnerState{
		runnerStateAt("load-a", "node-1", "10.244.1.7", "probe-x", 250*ms, 2*ms, last.Add(-3*ms), last),
		runnerStateAt("load-b", "node-2", "10.244.2.9", "probe-x", -40*ms, 80*ms, last, last.Add(ms)),
		runnerStateAt("load-c", "node-3", "10.244.3.2", "probe-y", 0, ms, last, last),
		{pod: "load-d", node: "node-4", statsErr: errors.New("pod proxy: 503")},
		{pod: "load-e", node: "node-5", statsOK: true, skewErr: errors.New("no exchange succeeded")},
	}
	rec := &results.Record{T0: t0}
	clusterStages(rec, states, "probe-x", 50*ms, time.Time{})

	if len(rec.Stages) != 1 {
		t.Fatalf("stages %+v, want one cluster_last_routed", rec.Stages)
	}
	s := rec.Stages[0]
	if s.Name != results.StageClusterLastRouted || s.Key != "load-a/node-1" || !s.At.Equal(last) ||
		s.Offset() != 1500*ms || s.UncertaintyNS != int64(5*ms) || s.Clock != results.ClockRunner {
		t.Errorf("stage %+v: want load-a/node-1 at T0+1.5s ±5ms on the runner clock", s)
	}
	if len(rec.Runners) != 5 {
		t.Fatalf("runners %+v", rec.Runners)
	}
	a := rec.Runners[0]
	if a.IP != "10.244.1.7" || a.SkewNS != int64(250*ms) || a.SkewUncertaintyNS != int64(2*ms) || a.Note != "" ||
		a.Failures["refused"] != 2 || a.Failures["timeout"] != 0 {
		t.Errorf("runner a %+v", a)
	}
	for i, want := range []string{"", "±80ms exceeds the 50ms", "no response from the deleted pod", "statistics could not be read", "clock could not be read"} {
		if got := rec.Runners[i].Note; want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("runner %s note %q, want %q", rec.Runners[i].Pod, got, want)
		}
	}
	if rec.ClusterFailures["refused"] != 6 {
		t.Errorf("cluster failures %v, want refused 6 (2 from each of three runners)", rec.ClusterFailures)
	}
}

// Through buildRecord: the runner's address is a last_accept key, so the
// record ties the probe's view to the runner's.
func TestBuildRecordWithRunners(t *testing.T) {
	ms := time.Millisecond
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	tl := &probe.Timeline{Sigterm: at(20 * ms), LastTrafficRequest: at(900 * ms), LastTrafficAccept: at(1499 * ms),
		Peers: []probe.Peer{{Addr: "10.244.1.7", LastTrafficAccept: at(1499 * ms)}, {Addr: "10.244.0.1", LastTrafficAccept: at(800 * ms)}}}
	in := trialInput{trial: 1, pod: "probe-x", node: "node-1", t0: t0, acked: t0.Add(ms), timeline: tl, skew: load.Estimate{Samples: 1, Uncertainty: ms},
		skewOK: true, runners: []*runnerState{runnerStateAt("load-a", "node-1", "10.244.1.7", "probe-x", 0, ms, t0.Add(1499*ms), t0.Add(1500*ms))},
		watch: trialWatch{terminatingSeen: t0.Add(2 * ms), sliceNotReady: t0.Add(30 * ms), podDeleted: t0.Add(3 * time.Second)}}
	rec := buildRecord(in)
	addrs := rec.RunnerAddrs()
	if !addrs["10.244.1.7"] {
		t.Fatalf("runner addresses %v", addrs)
	}
	la, ok := rec.StageKey(results.StageLastAccept, "10.244.1.7")
	cl, ok2 := rec.StageKey(results.StageClusterLastRouted, "load-a/node-1")
	if !ok || !ok2 {
		t.Fatalf("stages %+v", rec.Stages)
	}
	if d := cl.At.Sub(la.At); d < 0 || d > time.Duration(cl.UncertaintyNS+la.UncertaintyNS) {
		t.Errorf("cluster_last_routed %s vs last_accept[runner] %s: %s apart, beyond their bounds", cl.At, la.At, d)
	}
	if w, _ := rec.Window(); w != 1499*ms {
		t.Errorf("window %s, want the runner's last accept (1.499s)", w)
	}
}

// fakeRunners answers /clock with the fake clock plus offset, the clock
// stepping rtt during the call, and /stats with stats.
type fakeRunners struct {
	clk    *clocktesting.FakeClock
	offset time.Duration
	rtt    func(i int) time.Duration
	stats  load.Stats
	mu     sync.Mutex
	calls  int
	// log, when set, is the runner's stream log, served from the cursor
	// asked for as the runner's /stats serves it; asked records each
	// cursor.
	log   []load.StreamEvent
	asked []int64
}

func (f *fakeRunners) runnerStats(_ context.Context, _ string, since int64) (load.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, since)
	s := f.stats
	if f.log != nil {
		since = min(since, int64(len(f.log)))
		s.Streams = slices.Clone(f.log[since:])
		s.StreamsSince, s.StreamsNext = since, int64(len(f.log))
	}
	return s, nil
}
func (f *fakeRunners) probeClock(context.Context, string) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	half := f.rtt(f.calls) / 2
	f.clk.Step(half)
	p := f.clk.Now().Add(f.offset)
	f.clk.Step(half)
	return p, nil
}

// The runner's clock is read like the probe's: each /clock read is
// bracketed by the tool's send and receive, and the tightest exchange
// wins; a later read merges with the earlier estimate.
func TestReadRunnerSkew(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	f := &fakeRunners{clk: clk, offset: 700 * time.Millisecond, rtt: func(i int) time.Duration {
		return []time.Duration{0, 10, 4, 12, 6, 8, 30, 30, 30, 30, 30}[i] * time.Millisecond
	}}
	r := &runner{cfg: Config{Clock: clk}, runners: f}
	st := &runnerState{pod: "load-a"}
	r.readRunner(context.Background(), st, runnerClockSamples)
	if !st.skewOK || st.skew.Offset != 700*time.Millisecond || st.skew.Uncertainty != 2*time.Millisecond || st.skew.Samples != 5 {
		t.Errorf("skew %v, want +700ms ±2ms from the 4 ms exchange", st.skew)
	}
	r.readRunner(context.Background(), st, runnerClockSamples)
	if st.skew.Uncertainty != 2*time.Millisecond || st.skew.Samples != 10 {
		t.Errorf("after a looser second read: %v, want the first estimate kept, n=10", st.skew)
	}
	// A runner time converts back to the tool's clock.
	if got := st.skew.ToTool(t0.Add(time.Second + 700*time.Millisecond)); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("ToTool = %s", got)
	}
}

func TestRunnersLifetime(t *testing.T) {
	cfg := Config{Trials: 3, SettleTimeout: time.Minute, TrialJitter: 3 * time.Second, Hold: 60 * time.Second, QuietPeriod: 3 * time.Second}
	got := runnersLifetime(cfg, 70*time.Second)
	per := time.Minute + 3*time.Second + 60*time.Second + 70*time.Second + 30*time.Second + 3*time.Second
	// 3 trials may become 4: one more to replace a trial without a valid
	// window (trialBudget).
	if want := time.Minute + 4*per + time.Minute; got != want {
		t.Errorf("lifetime %s, want %s", got, want)
	}
	cfg.Trials = 10000
	if got := runnersLifetime(cfg, 70*time.Second); got != load.MaxLifetime {
		t.Errorf("lifetime %s, want capped at %s", got, load.MaxLifetime)
	}
}

func TestRunnerTarget(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.4.5", Ports: []corev1.ServicePort{{Port: 8080}}}}
	if u, err := runnerTarget(svc); err != nil || u != "http://10.96.4.5:8080/" {
		t.Errorf("target %q, %v", u, err)
	}
	svc.Spec.ClusterIP = corev1.ClusterIPNone
	if _, err := runnerTarget(svc); err == nil || !strings.Contains(err.Error(), "--in-cluster-load") {
		t.Errorf("headless service: %v", err)
	}
}

func node(name string, mod func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if mod != nil {
		mod(n)
	}
	return n
}

// More runners than schedulable nodes is bad input naming the flag;
// cordoned, tainted and not-ready nodes do not count; a caller who may not
// list nodes is not refused.
func TestCheckRunnerNodes(t *testing.T) {
	cs := fake.NewClientset(node("n1", nil), node("n2", nil),
		node("cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node("tainted", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
		}),
		node("notready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }))
	if checked, err := CheckRunnerNodes(context.Background(), cs, 2); !checked || err != nil {
		t.Errorf("2 runners on 2 nodes: %v %v", checked, err)
	}
	_, err := CheckRunnerNodes(context.Background(), cs, 3)
	var fe *FlagError
	if !errors.As(err, &fe) || fe.Flag != FlagInClusterLoad || !strings.Contains(err.Error(), "--in-cluster-load: 3 runners") ||
		!strings.Contains(err.Error(), "2 schedulable nodes") {
		t.Errorf("3 runners on 2 nodes: %v", err)
	}
	cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), "", errors.New("no"))
	})
	if checked, err := CheckRunnerNodes(context.Background(), cs, 9); checked || err != nil {
		t.Errorf("forbidden: %v %v, want unchecked and no error", checked, err)
	}
}

// A runner the scheduler cannot place ends the wait as bad input.
func TestReadyRunners(t *testing.T) {
	ready := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	other := *ready.DeepCopy()
	other.Name = "a"
	pending := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	got, err := readyRunners([]corev1.Pod{ready, pending, other})
	if err != nil || len(got) != 2 || got[0].Name != "a" {
		t.Errorf("ready %v, %v", got, err)
	}
	pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints."}}
	var fe *FlagError
	if _, err := readyRunners([]corev1.Pod{ready, pending}); !errors.As(err, &fe) || fe.Flag != FlagInClusterLoad {
		t.Errorf("unschedulable runner: %v", err)
	}
}

func TestConfigValidateRunners(t *testing.T) {
	for _, tt := range []struct {
		n    int
		rate float64
		want string
	}{
		{2, 0, "--in-cluster-rate (0)"},
		{2, -1, "--in-cluster-rate (-1)"},
		{2, load.MaxRate + 1, "--in-cluster-rate (5001)"},
		{-1, 10, "--in-cluster-load (-1)"},
		{0, 0, ""}, // no runners: the rate is not used
		{3, 100, ""},
	} {
		cfg := validConfig()
		cfg.InClusterLoad, cfg.InClusterRate = tt.n, tt.rate
		err := cfg.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("load %d rate %g: %v, want %q", tt.n, tt.rate, err, tt.want)
		}
	}
}

// Ctrl-C while the runners' Deployment is being created: the create
// finishes (it runs on a context Ctrl-C does not cancel), and cleanup then
// deletes the runners' Deployment under its UID and every runner pod, in a
// shared namespace where nothing goes with a namespace.
func TestCleanupRunnersAfterInterrupt(t *testing.T) {
	const ns = "team-a"
	r, cs, clk, _ := cleanupRunner(t, ns, true)
	r.cfg.InClusterLoad, r.cfg.InClusterRate = 2, 20
	r.cfg.SettleTimeout, r.cfg.Hold, r.cfg.QuietPeriod = time.Minute, time.Minute, time.Second
	r.params = deploy.Params{Namespace: ns, Name: "epwindow-abc123", RunID: "abc123"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service).DeepCopy()
		svc.UID, svc.Spec.ClusterIP = "svc-uid", "10.96.0.20"
		return true, svc, nil
	})
	cs.PrependReactor("create", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment)
		if d.Name != deploy.RunnerName("epwindow-abc123") {
			return false, nil, nil
		}
		if !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Command, " "), "--url=http://10.96.0.20:8080/") {
			t.Errorf("runners target %q, want the Service's ClusterIP", d.Spec.Template.Spec.Containers[0].Command)
		}
		// Ctrl-C arrives; the ReplicaSet has made the runner pods already.
		cancel()
		for _, n := range []string{"epwindow-abc123-load-x", "epwindow-abc123-load-y"} {
			if err := cs.Tracker().Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n, UID: types.UID("uid-" + n),
				Labels: d.Spec.Template.Labels}}); err != nil {
				t.Error(err)
			}
		}
		d = d.DeepCopy()
		d.UID = "runners-uid"
		return true, d, nil
	})
	if err := r.create(ctx); err != nil {
		t.Fatalf("create: %v", err)
	}
	if r.made.runners != "runners-uid" {
		t.Fatalf("runners' UID %q not kept for cleanup", r.made.runners)
	}
	if _, err := runCleanup(t, r, clk); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: r.runnerSelector().String()})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("runner pods left: %v (%v)", pods, err)
	}
	var runnerDeletes int
	for _, d := range deletes(cs, "deployments") {
		if d.Name == "epwindow-abc123-load" {
			runnerDeletes++
			if p := d.DeleteOptions.Preconditions; p == nil || *p.UID != "runners-uid" {
				t.Errorf("runners' deployment deleted without its UID precondition: %+v", d.DeleteOptions)
			}
		}
	}
	if runnerDeletes == 0 {
		t.Error("the runners' deployment was never deleted")
	}
}

// A runner's stream log is read from a cursor: each read asks for the
// events after the previous one's, and a trial still sees the whole log.
// A runner that restarted (a new start, a shorter log) is read afresh.
func TestReadRunnerStreamsSinceCursor(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	ev := func(n int) []load.StreamEvent {
		out := make([]load.StreamEvent, n)
		for i := range out {
			out[i] = load.StreamEvent{Slot: i, Kind: load.EventOpen, At: t0.Add(time.Duration(i) * time.Millisecond)}
		}
		return out
	}
	f := &fakeRunners{clk: clk, stats: load.Stats{Version: load.StatsVersion, Started: t0}, log: ev(3)}
	r := &runner{cfg: Config{Clock: clk}, runners: f}
	read := func(what string, want []load.StreamEvent) {
		t.Helper()
		st := &runnerState{pod: "load-a"} // each trial starts a new state
		r.readRunner(context.Background(), st, 0)
		if !st.statsOK || !slices.Equal(st.stats.Streams, want) {
			t.Fatalf("%s: streams %v, want %v", what, st.stats.Streams, want)
		}
	}
	read("first read", ev(3))
	f.log = ev(5)
	read("second read", ev(5))
	read("nothing new", ev(5))
	if want := []int64{0, 3, 5}; !slices.Equal(f.asked, want) {
		t.Errorf("cursors asked %v, want %v: each read from the previous one's end", f.asked, want)
	}
	// Restarted: a new start and a log of 1. The read that finds it asks
	// from the old cursor, sees the restart and asks again from 0.
	f.stats.Started, f.log = t0.Add(time.Minute), ev(1)
	read("restarted runner", ev(1))
	read("restarted runner, again", ev(1))
	if want := []int64{0, 3, 5, 5, 0, 1}; !slices.Equal(f.asked, want) {
		t.Errorf("cursors asked %v, want %v", f.asked, want)
	}
}

// A runner whose stream log was full before the trial's observation ended
// leaves out the trial's ClusterIP stream record, with a reason; one that
// filled only after it does not.
func TestClusterStreamsLogFull(t *testing.T) {
	until := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name  string
		first time.Time // runner clock, 1 s ahead of the tool's
		full  bool
	}{
		{"full before the end", t0.Add(5 * time.Second), true},
		{"full after the end", t0.Add(12 * time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &runnerState{pod: "load-a", statsOK: true, skewOK: true,
				skew:  load.Estimate{Offset: time.Second},
				stats: load.Stats{StreamsDropped: 7, StreamsFirstDropped: tc.first}}
			own, cluster, reasons := streamsLogFull(0, time.Time{}, []*runnerState{st}, until)
			if own || cluster != tc.full || (len(reasons) > 0) != tc.full {
				t.Fatalf("own %v cluster %v reasons %v, want the cluster record full %v", own, cluster, reasons, tc.full)
			}
			if tc.full && (reasons[0].Code != results.ReasonStreamsLogFull || !strings.Contains(reasons[0].Detail, "load-a")) {
				t.Errorf("reason %v: want %s naming the runner", reasons[0], results.ReasonStreamsLogFull)
			}
		})
	}
}
