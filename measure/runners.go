package measure

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/results"
)

// FlagError is bad input found only once the cluster was asked (too many
// runners for its nodes, a Gateway that does not exist): the CLI exits 2
// for it, naming Flag and, when set, the Value given.
type FlagError struct {
	Flag  string
	Value string
	Err   error
}

func (e *FlagError) Error() string {
	if e.Value != "" {
		return fmt.Sprintf("--%s %s: %v", e.Flag, e.Value, e.Err)
	}
	return fmt.Sprintf("--%s: %v", e.Flag, e.Err)
}
func (e *FlagError) Unwrap() error { return e.Err }

// schedulable reports whether a pod without tolerations can be scheduled on
// node: not cordoned, Ready, and without a NoSchedule or NoExecute taint.
func schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CheckRunnerNodes checks, before anything is created, that n runners fit
// one per schedulable node. Listing nodes is cluster-wide and no RBAC
// variant grants it, so a caller who may not list nodes is not refused:
// checked is false, and the run finds out from the scheduler instead (see
// runnersFailed).
func CheckRunnerNodes(ctx context.Context, client kubernetes.Interface, n int) (checked bool, err error) {
	if n <= 0 {
		return true, nil
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("list nodes for --%s: %w", FlagInClusterLoad, err)
	}
	count := 0
	for i := range nodes.Items {
		if schedulable(&nodes.Items[i]) {
			count++
		}
	}
	if n > count {
		return true, &FlagError{Flag: FlagInClusterLoad, Err: fmt.Errorf("%d runners, one per node, but the cluster has %d schedulable nodes", n, count)}
	}
	return true, nil
}

// runnersLifetime is how long the runners send before they stop by
// themselves, should the tool die without cleaning up: the longest the run
// can take (a settle wait, then per trial a pause, a settle wait, the hold
// and the removal wait, for every trial the run may add to replace ones
// without a valid window), capped at load.MaxLifetime. It is a duration that
// each runner counts on its own clock from its start, not an instant on the
// tool's clock: skew between the two cannot shorten it or make the runner
// refuse to start.
func runnersLifetime(cfg Config, grace time.Duration) time.Duration {
	perTrial := cfg.SettleTimeout + cfg.TrialJitter + cfg.PreStopSleep + cfg.Hold + grace + 30*time.Second + cfg.QuietPeriod
	d := cfg.SettleTimeout + time.Duration(newTrialBudget(cfg.Trials).limit)*perTrial + time.Minute
	return min(d, load.MaxLifetime)
}

// runnerTarget is the probe Service's ClusterIP URL, the runners' one target.
func runnerTarget(svc *corev1.Service) (string, error) {
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || len(svc.Spec.Ports) == 0 {
		return "", fmt.Errorf("service %s/%s has no ClusterIP (%q) and port for --%s", svc.Namespace, svc.Name, svc.Spec.ClusterIP, FlagInClusterLoad)
	}
	return "http://" + netip.AddrPortFrom(ip, uint16(svc.Spec.Ports[0].Port)).String() + "/", nil
}

// renderRunners builds the runner Deployment for the created Service.
func (r *runner) renderRunners(svc *corev1.Service) (*appsv1.Deployment, error) {
	target, err := runnerTarget(svc)
	if err != nil {
		return nil, err
	}
	rp := deploy.RunnerParams{Count: r.cfg.InClusterLoad, Target: target,
		Rate: r.cfg.InClusterRate, Lifetime: runnersLifetime(r.cfg, r.grace())}
	if s := r.cfg.Streams; s.N > 0 {
		// Each runner holds the run's streams through the ClusterIP too.
		rp.Streams, rp.StreamProtocol, rp.Reconnect = s.N, s.Protocol, s.Reconnect.String()
	}
	if r.cfg.GRPCDNSRate > 0 {
		// Each runner is also a gRPC client of the headless Service,
		// resolving it with its pod's resolv.conf: the cluster DNS.
		rp.GRPCTarget, rp.GRPCRate, rp.GRPCWaitAddrs = r.runnerGRPCTarget(), r.cfg.GRPCDNSRate, int(r.cfg.Replicas)
	}
	return deploy.RunnerDeployment(r.wl, r.params, rp)
}

func (r *runner) runnerSelector() labels.Selector {
	return labels.SelectorFromSet(r.params.RunnerSelector())
}

// runnerPods lists the run's runner pods.
func (r *runner) runnerPods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := r.cfg.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: r.runnerSelector().String()})
	if err != nil {
		return nil, fmt.Errorf("list runner pods in %s: %w", r.ns, err)
	}
	return l.Items, nil
}

// readyRunners are the runner pods that run, are Ready and have an address,
// by name; failed is set when one cannot be scheduled (more runners than
// nodes that take them) or has stopped.
func readyRunners(pods []corev1.Pod) (ready []corev1.Pod, failed error) {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return nil, &FlagError{Flag: FlagInClusterLoad, Err: fmt.Errorf("runner pod %s cannot be scheduled (one runner per node): %s", p.Name, c.Message)}
			}
		}
		if p.Status.Phase == corev1.PodRunning && podReady(&p) && p.Status.PodIP != "" {
			ready = append(ready, p)
		}
	}
	slices.SortFunc(ready, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return ready, nil
}

// runnerState is what a trial knows of one runner: who it is, its
// statistics (runner clock) and its clock's offset from the tool's.
type runnerState struct {
	pod, node, ip string
	stats         load.Stats
	statsOK       bool
	statsErr      error
	skew          load.Estimate
	skewOK        bool
	skewErr       error
	// before are its failure totals when the trial began, grpcBefore its
	// gRPC client's (--grpc-dns-rate).
	before, grpcBefore map[string]int
}

// readRunner reads a runner's statistics and samples its clock through the
// pod proxy (the probe's /clock estimate: send and receive bracket the
// reading, smallest round trip wins), merging with what st already had.
func (r *runner) readRunner(ctx context.Context, st *runnerState, clockSamples int) {
	since := r.runnerLogs.cursor(st.pod)
	s, err := r.runners.runnerStats(ctx, st.pod, since)
	if err == nil {
		var ok bool
		if s.Streams, ok = r.runnerLogs.merge(st.pod, since, s); !ok {
			// Not the log the cursor was for (the runner restarted):
			// read it from its start.
			if s, err = r.runners.runnerStats(ctx, st.pod, 0); err == nil {
				s.Streams, _ = r.runnerLogs.merge(st.pod, 0, s)
			}
		}
	}
	if err == nil {
		st.stats, st.statsOK, st.statsErr = s, true, nil
	} else {
		st.statsErr = err
	}
	if clockSamples == 0 {
		return
	}
	est, err := load.ClockSample(ctx, r.cfg.Clock, func(ctx context.Context) (time.Time, error) {
		return r.runners.probeClock(ctx, st.pod)
	}, clockSamples)
	if err != nil {
		st.skewErr = err
		return
	}
	if st.skewOK {
		est, _ = load.Best(st.skew, est)
	}
	st.skew, st.skewOK = est, true
}

// runnerLogs is what the tool has read of each runner's stream log, by
// runner pod: the runners' /stats is read every second of a trial, and
// re-fetching a log of up to load.DefaultMaxStreamEvents events each time
// (≈ 150 bytes an event) would move the whole log through the API server's
// pod proxy every second; a cursor moves only what is new.
type runnerLogs struct {
	mu sync.Mutex
	by map[string]*runnerLog
}

// runnerLog is one runner's stream log as read so far: its events (runner
// clock) and the cursor of the next read, for the runner started at
// started (a restarted runner has a new log).
type runnerLog struct {
	started time.Time
	events  []load.StreamEvent
	next    int64
}

// cursor is where the next read of pod's log starts.
func (l *runnerLogs) cursor(pod string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.by[pod]; c != nil {
		return c.next
	}
	return 0
}

// merge adds s, read from cursor since, to pod's log and returns the whole
// log so far. A reply that is not the continuation asked for replaces the
// log when it is a whole one (read from 0, or from a runner that serves
// its whole log whatever the cursor: its streams_next does not follow its
// events); otherwise (a restarted runner read from the old cursor) it
// empties the log and ok is false: read again from 0.
func (l *runnerLogs) merge(pod string, since int64, s load.Stats) (events []load.StreamEvent, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string]*runnerLog{}
	}
	c := l.by[pod]
	if c == nil || !c.started.Equal(s.Started) {
		c = &runnerLog{started: s.Started}
		l.by[pod] = c
	}
	switch {
	case s.StreamsNext != s.StreamsSince+int64(len(s.Streams)):
		// No cursor support: the reply is the whole log.
		c.events, c.next = slices.Clone(s.Streams), 0
	case s.StreamsSince == c.next && since == c.next:
		c.events, c.next = append(c.events, s.Streams...), s.StreamsNext
	case s.StreamsSince == 0:
		c.events, c.next = slices.Clone(s.Streams), s.StreamsNext
	default:
		c.events, c.next = nil, 0
		return nil, false
	}
	return slices.Clip(c.events), true
}

// runnerClockSamples is how many /clock reads estimate a runner's clock at
// each end of a trial.
const runnerClockSamples = 5

// startRunners snapshots the ready runners as a trial begins.
func (r *runner) startRunners(ctx context.Context) []*runnerState {
	if r.cfg.InClusterLoad == 0 {
		return nil
	}
	pods, err := r.runnerPods(ctx)
	if err != nil {
		return nil
	}
	ready, _ := readyRunners(pods)
	var out []*runnerState
	for _, p := range ready {
		st := &runnerState{pod: p.Name, node: p.Spec.NodeName, ip: p.Status.PodIP}
		r.readRunner(ctx, st, runnerClockSamples)
		st.before = st.stats.Failures
		if c := st.stats.GRPCClient; c != nil {
			st.grpcBefore = c.Failures
		}
		out = append(out, st)
	}
	return out
}

// runnersLast is the latest response any runner had from pod, on the tool's
// clock (zero when none, or no runner clock is known).
func runnersLast(states []*runnerState, pod string) time.Time {
	var last time.Time
	for _, st := range states {
		if !st.statsOK || !st.skewOK {
			continue
		}
		for _, p := range st.stats.Pods {
			if p.Pod == pod {
				last = maxTime(last, st.skew.ToTool(p.Last))
			}
		}
	}
	return last
}

// clusterStages adds the runners of a trial to its record: one Runner
// entry each, and for each runner that got a response from the deleted
// pod, cluster_last_routed keyed by "pod/node": its last response from it,
// on the runner's clock, put on the tool's with the runner's skew
// estimate. The uncertainty is the skew bound plus the exchange's own span
// (the request was routed between its send and its response, like
// client_last_routed). A runner whose clock or statistics could not be
// read, or whose skew bound exceeds maxSkew, gets a note instead of the
// stage: the probe's own record (last_accept from the runner's address)
// still covers its path.
//
// A runner with a gRPC client (--grpc-dns-rate) also gets its record of how
// that client left the pod (Runner.GRPC) and its grpc_last_routed, keyed
// like cluster_last_routed; drainFrom is as for grpcTrial.
func clusterStages(rec *results.Record, states []*runnerState, pod string, maxSkew time.Duration, drainFrom time.Time) {
	for _, st := range states {
		rn := results.Runner{Pod: st.pod, Node: st.node, IP: st.ip}
		if st.statsOK {
			rn.Failures = subCounts(st.stats.Failures, st.before)
			rec.ClusterFailures = results.AddCounts(rec.ClusterFailures, rn.Failures)
		}
		if st.skewOK {
			rn.SkewNS, rn.SkewUncertaintyNS = int64(st.skew.Offset), int64(st.skew.Uncertainty)
		}
		var ps *load.PodReport
		for i := range st.stats.Pods {
			if st.stats.Pods[i].Pod == pod {
				ps = &st.stats.Pods[i]
			}
		}
		switch {
		case !st.statsOK:
			rn.Note = fmt.Sprintf("its statistics could not be read: %v", st.statsErr)
		case !st.skewOK:
			rn.Note = fmt.Sprintf("its clock could not be read: %v", st.skewErr)
		case maxSkew > 0 && st.skew.Uncertainty > maxSkew:
			rn.Note = fmt.Sprintf("its clock-skew bound ±%s exceeds the %s allowed", st.skew.Uncertainty, maxSkew)
		case ps == nil || ps.Responses == 0:
			rn.Note = "no response from the deleted pod"
		default:
			// ClusterLastRouted: runner's last response from the pod, runner
			// clock corrected by its skew, ms + skew bound.
			at := st.skew.ToTool(ps.Last)
			unc := st.skew.Uncertainty + ps.Last.Sub(ps.LastSent)
			addStage(rec, results.StageClusterLastRouted, rn.Key(), at, unc, results.ClockRunner)
		}
		if c := st.stats.GRPCClient; c != nil && st.statsOK && st.skewOK && (maxSkew == 0 || st.skew.Uncertainty <= maxSkew) {
			rn.GRPC = runnerGRPC(rec, st, c, pod, rn.Key(), drainFrom)
		}
		rec.Runners = append(rec.Runners, rn)
	}
	slices.SortStableFunc(rec.Stages, func(a, b results.Stage) int { return a.At.Compare(b.At) })
}

// runnerGRPC is a runner's gRPC client's record of the trial, its
// grpc_last_routed added to rec.
func runnerGRPC(rec *results.Record, st *runnerState, c *load.GRPCClientStats, pod, key string, drainFrom time.Time) *results.GRPCTrial {
	in := &grpcInput{log: c.Log, failures: subCounts(c.Failures, st.grpcBefore)}
	for _, p := range c.Pods {
		if p.Pod == pod {
			in.last, in.called = p.PodStats(), true
		}
	}
	add := func(name, key string, at time.Time, unc time.Duration, clk results.Clock) {
		addStage(rec, name, key, at, unc, clk)
	}
	return grpcTrialOn(in, grpcClock{key: key, toTool: st.skew.ToTool, unc: st.skew.Uncertainty, clock: results.ClockRunner},
		rec.T0, drainFrom, add)
}

// subCounts is a − b by key, keeping the positive differences.
func subCounts(a, b map[string]int) map[string]int {
	var out map[string]int
	for k, n := range a {
		if d := n - b[k]; d > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[k] = d
		}
	}
	return out
}

// runnersSteady says what the runners still lack for steady state, "" when
// every probe pod in pods has answered a runner since the wait began (base
// holds each runner's per-pod response counts at its first look), or fails
// when a runner cannot run.
func (r *runner) runnersSteady(ctx context.Context, pods []*corev1.Pod, base map[string]int64) (string, error) {
	if r.cfg.InClusterLoad == 0 {
		return "", nil
	}
	all, err := r.runnerPods(ctx)
	if err != nil {
		return err.Error(), nil
	}
	ready, failed := readyRunners(all)
	if failed != nil {
		return "", failed
	}
	if len(ready) < r.cfg.InClusterLoad {
		return fmt.Sprintf("%d of %d in-cluster runners ready", len(ready), r.cfg.InClusterLoad), nil
	}
	grew := map[string]bool{}
	for _, p := range ready {
		// Through the cursor: the whole stream log so far, fetching only
		// what is new since the last poll.
		st := &runnerState{pod: p.Name}
		r.readRunner(ctx, st, 0)
		if !st.statsOK {
			return fmt.Sprintf("runner %s: %v", p.Name, st.statsErr), nil
		}
		s := st.stats
		// The runner's streams must be open before a trial, as the
		// tool's are (startStreams): a stream that opens after SIGTERM is
		// not one the trial can follow.
		if n := r.cfg.Streams.N; n > 0 {
			if open := load.OpenStreams(s.Streams); open < n {
				return fmt.Sprintf("runner %s: %d of %d streams open through the ClusterIP", p.Name, open, n), nil
			}
		}
		// The runner's gRPC client must call every probe pod before the
		// first trial: it resolved the headless Service once, at its
		// start. Not before later ones: it learns of a replacement pod
		// only when it resolves again, at most every 30 s after a lost
		// connection (grpc-go), and a trial deletes the oldest pod, which
		// it knows; a trial whose pod it did not call says so.
		if c := s.GRPCClient; c != nil && !r.grpcSteady {
			for _, pod := range pods {
				if !slices.ContainsFunc(c.Pods, func(pr load.PodReport) bool { return pr.Pod == pod.Name }) {
					return fmt.Sprintf("runner %s: pod %s not yet answering its gRPC client (%s)", p.Name, pod.Name, c.Target), nil
				}
			}
		}
		for _, ps := range s.Pods {
			k := p.Name + "\x00" + ps.Pod
			if n, seen := base[k]; !seen {
				base[k] = ps.Responses
			} else if ps.Responses > n {
				grew[ps.Pod] = true
			}
		}
	}
	for _, p := range pods {
		if !grew[p.Name] {
			return fmt.Sprintf("pod %s not yet receiving load through the ClusterIP", p.Name), nil
		}
	}
	r.grpcSteady = true
	return "", nil
}

// deleteRunners deletes the runner Deployment (by name and, when known,
// UID) and its pods with a 1 s grace; it returns how many runner pods
// still exist (-1 when they cannot be listed).
func (r *runner) deleteRunners(ctx context.Context) (int, error) {
	if r.runnerDep == nil {
		return 0, nil
	}
	c := r.cfg.Client
	var errs []error
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	if uid := r.made.runners; uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	name := r.runnerDep.Name
	if err := c.AppsV1().Deployments(r.ns).Delete(ctx, name, opts); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("clean up: delete deployment %s/%s (delete it by hand: kubectl -n %s delete deployment %s): %w", r.ns, name, r.ns, name, err))
	}
	pods, err := r.runnerPods(ctx)
	if err != nil {
		return -1, errors.Join(append(errs, err)...)
	}
	for _, p := range pods {
		uid := p.UID
		_ = c.CoreV1().Pods(r.ns).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptrTo(int64(1)), Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	return len(pods), errors.Join(errs...)
}
