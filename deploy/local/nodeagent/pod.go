package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// container is the agent's record of one container of a pod.
type container struct {
	spec     v1.Container
	view     containerView
	init     bool // an init container: runs to completion before the others
	done     bool // an init container that exited 0
	proc     *proc
	run      int                // increments at each start
	stopProb context.CancelFunc // stops the readiness prober of this run
	restarts int                // restarts in a row, for the backoff
	nextTry  time.Time          // when a restart (or a failed start's retry) may happen
	noMore   bool               // never (re)start again: terminating or done
	killing  bool
	hurry    chan time.Time // a shortened termination deadline
	termFile string
	logFile  string
}

// podWorker owns one pod: its network, processes, probes and status.
// Everything below runs on its goroutine; other goroutines post closures.
type podWorker struct {
	a   *agent
	uid types.UID
	log *slog.Logger

	mu     sync.Mutex
	latest *v1.Pod // newest object from the informer; nil once deleted
	gone   bool
	ns     string // network namespace path, for the kubelet API
	notify chan struct{}
	events chan func()
	quit   chan struct{} // closed when run returns

	pod        *v1.Pod
	dir        string
	nsPath     string
	podIP      string
	netErr     error
	started    time.Time
	containers []*container
	conds      map[v1.PodConditionType]condState
	terminal   bool
	termStart  time.Time // zero until termination began
	grace      int64
	killBy     time.Time // a shortened deadline, zero if none
	status     *statusSyncer
}

func newPodWorker(a *agent, pod *v1.Pod) *podWorker {
	return &podWorker{
		a:      a,
		uid:    pod.UID,
		log:    a.log.With("pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID),
		latest: pod,
		notify: make(chan struct{}, 1),
		events: make(chan func(), 64),
		quit:   make(chan struct{}),
		conds:  map[v1.PodConditionType]condState{},
	}
}

// netnsPath is the pod's network namespace, "" when it has none.
func (w *podWorker) netnsPath() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ns
}

// update hands the worker a newer pod object, or nil when it was deleted.
func (w *podWorker) update(pod *v1.Pod) {
	w.mu.Lock()
	if pod == nil {
		w.gone = true
	} else {
		w.latest = pod
	}
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// post runs f on the worker goroutine.
func (w *podWorker) post(ctx context.Context, f func()) {
	select {
	case w.events <- f:
	case <-w.quit:
	case <-ctx.Done():
	}
}

// run drives the pod until it is gone, or until ctx ends (agent shutdown:
// everything is killed at once and the network removed).
func (w *podWorker) run(ctx context.Context) {
	defer close(w.quit)
	w.mu.Lock()
	w.pod = w.latest
	w.mu.Unlock()
	w.started = w.a.clock.Now()
	w.dir = podDir(w.a.cfg, w.pod)
	w.status = newStatusSyncer(w.a, w.pod, w.log)
	go w.status.run(ctx)
	inits := len(w.pod.Spec.InitContainers)
	for i, spec := range append(append([]v1.Container(nil), w.pod.Spec.InitContainers...), w.pod.Spec.Containers...) {
		c := &container{spec: spec, init: i < inits}
		reason := "ContainerCreating"
		if inits > 0 {
			reason = "PodInitializing"
		}
		c.view = containerView{Name: c.spec.Name, Image: c.spec.Image, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}}
		c.termFile = filepath.Join(w.dir, c.spec.Name+".termination-log")
		c.logFile = filepath.Join(w.dir, c.spec.Name+".log")
		w.containers = append(w.containers, c)
	}
	if isTerminalPhase(w.pod.Status.Phase) {
		// Finished before this agent saw it: nothing to run.
		w.terminal = true
		w.waitForDeletion(ctx)
		return
	}
	w.publish()
	if w.pod.DeletionTimestamp == nil {
		w.setupNetwork(ctx)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if w.pod == nil || w.pod.DeletionTimestamp != nil {
			w.beginTermination(ctx)
		}
		if w.termStart.IsZero() {
			w.startDue(ctx)
		}
		if w.finishedTermination() {
			w.finish(ctx)
			return
		}
		if w.doneRunning() && !w.terminal {
			w.terminal = true
			w.publish()
			w.teardownNetwork()
			w.waitForDeletion(ctx)
			return
		}
		w.publish()
		timer.Reset(w.nextWake())
		select {
		case <-ctx.Done():
			w.shutdown()
			return
		case <-w.notify:
			w.mu.Lock()
			if w.gone {
				w.pod = nil
			} else {
				w.pod = w.latest
			}
			w.mu.Unlock()
		case f := <-w.events:
			f()
		case <-timer.C:
		}
	}
}

// podDir holds a pod's container logs and termination-message files.
func podDir(cfg Config, pod *v1.Pod) string {
	return filepath.Join(cfg.StateDir, "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
}

func isTerminalPhase(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// setupNetwork creates the pod's namespace and address; a failure is
// reported in the status and retried by startDue.
func (w *podWorker) setupNetwork(ctx context.Context) {
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		w.netErr = err
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ns, ip, err := w.a.net.add(cctx, w.pod.Spec.NodeName, string(w.uid))
	if err != nil {
		w.netErr = err
		w.log.Error("pod network", "err", err)
		_ = w.a.net.del(cctx, w.pod.Spec.NodeName, string(w.uid))
		return
	}
	w.netErr, w.nsPath, w.podIP = nil, ns, ip.String()
	w.mu.Lock()
	w.ns = ns
	w.mu.Unlock()
	w.log.Info("pod network ready", "ip", w.podIP, "netns", ns)
}

// startDue starts every container whose (re)start is due.
func (w *podWorker) startDue(ctx context.Context) {
	if w.nsPath == "" {
		w.setupNetwork(ctx)
		if w.nsPath == "" {
			for _, c := range w.containers {
				c.view.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating", Message: fmt.Sprint(w.netErr)}}
				c.nextTry = w.a.clock.Now().Add(5 * time.Second)
			}
			return
		}
	}
	now := w.a.clock.Now()
	for _, c := range w.containers {
		if c.init && c.done {
			continue
		}
		if c.init && c.proc != nil {
			return // init containers run one at a time, in order
		}
		if !c.init && !w.initDone() {
			return
		}
		if c.proc != nil || c.noMore || now.Before(c.nextTry) {
			if c.init {
				return
			}
			continue
		}
		if err := w.start(ctx, c); err != nil {
			w.log.Error("start container", "container", c.spec.Name, "err", err)
			c.view.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}
			c.nextTry = now.Add(10 * time.Second)
		}
		if c.init {
			return
		}
	}
}

// initDone reports whether every init container has exited 0.
func (w *podWorker) initDone() bool {
	for _, c := range w.containers {
		if c.init && !c.done {
			return false
		}
	}
	return true
}

// start starts one container process and its readiness prober.
func (w *podWorker) start(ctx context.Context, c *container) error {
	info := podRuntimeInfo{PodIP: w.podIP, HostIP: w.a.hostIP}
	env, err := containerEnv(ctx, w.a.client, w.pod, &c.spec, info)
	if err != nil {
		return err
	}
	path, argv, err := containerCommand(w.a.cfg.BinDir, &c.spec, env)
	if err != nil {
		return err
	}
	spec := shimSpec{NetNS: w.nsPath, Hostname: w.pod.Name, Path: path, Args: argv, Env: env, Dir: c.spec.WorkingDir}
	if err := applySecurity(&spec, w.pod, &c.spec); err != nil {
		return err
	}
	if c.spec.TerminationMessagePath != "" {
		// Fresh, world-writable file per run, as the kubelet makes it
		// (kuberuntime_container.go, makeMounts: chmod 0666).
		if err := os.WriteFile(c.termFile, nil, 0o666); err != nil {
			return fmt.Errorf("termination message file: %w", err)
		}
		if err := os.Chmod(c.termFile, 0o666); err != nil {
			return err
		}
		spec.TermLog, spec.TermPath = c.termFile, c.spec.TerminationMessagePath
	}
	p, err := startProc(w.a.shimPath, spec, c.logFile)
	if err != nil {
		return err
	}
	c.run++
	c.proc = p
	if c.view.Ever {
		c.view.RestartCount++
	}
	c.view.Ever = true
	c.view.ContainerID = fmt.Sprintf("epwindow://%s-%s-%d", w.uid, c.spec.Name, c.run)
	c.view.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(p.started)}}
	c.view.Ready = c.spec.ReadinessProbe == nil
	w.log.Info("container started", "container", c.spec.Name, "pid", p.cmd.Process.Pid, "path", path)
	pctx, cancel := context.WithCancel(ctx)
	c.stopProb = cancel
	if c.spec.ReadinessProbe != nil {
		go w.readinessLoop(pctx, c, c.run, p.started)
	}
	run := c.run
	go func() {
		<-p.done
		w.post(ctx, func() { w.exited(c, run) })
	}()
	return nil
}

// applySecurity copies runAsUser/runAsGroup, supplemental groups and
// readOnlyRootFilesystem from the container's and the pod's security context.
func applySecurity(spec *shimSpec, pod *v1.Pod, c *v1.Container) error {
	var uid, gid *int64
	var groups []int
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid, gid = psc.RunAsUser, psc.RunAsGroup
		for _, g := range psc.SupplementalGroups {
			groups = append(groups, int(g))
		}
		if psc.FSGroup != nil {
			groups = append(groups, int(*psc.FSGroup))
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
		spec.ReadOnlyRoot = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
	}
	if uid == nil && gid == nil {
		return nil
	}
	spec.SetUser = true
	if uid != nil {
		spec.UID = int(*uid)
	}
	if gid != nil {
		spec.GID = int(*gid)
	}
	spec.Groups = groups
	return nil
}

// exited records a container's exit and schedules its restart.
func (w *podWorker) exited(c *container, run int) {
	if run != c.run || c.proc == nil {
		return
	}
	p := c.proc
	c.proc = nil
	if c.stopProb != nil {
		c.stopProb()
	}
	msg := terminationMessage(c.termFile, c.logFile, string(c.spec.TerminationMessagePolicy), p.exit.Code)
	reason := "Completed"
	if p.exit.Code != 0 {
		reason = "Error"
	}
	t := &v1.ContainerStateTerminated{
		ExitCode:    p.exit.Code,
		Reason:      reason,
		Message:     msg,
		StartedAt:   metav1.NewTime(p.started),
		FinishedAt:  metav1.NewTime(p.exit.Finished),
		ContainerID: c.view.ContainerID,
	}
	c.view.State = v1.ContainerState{Terminated: t}
	c.view.Ready = false
	if p.exit.Code == 128 {
		// The shim could not start it: its reason is the log's last line.
		tail, _ := readTail(c.logFile, 512)
		w.log.Error("container failed to start", "container", c.spec.Name, "log_tail", string(tail))
	}
	w.log.Info("container exited", "container", c.spec.Name, "code", p.exit.Code, "ran", p.exit.Finished.Sub(p.started))
	if !w.termStart.IsZero() || c.noMore {
		c.noMore = true
		return
	}
	if c.init && p.exit.Code == 0 {
		c.done, c.noMore = true, true
		return
	}
	policy := w.pod.Spec.RestartPolicy
	if c.init && policy == v1.RestartPolicyAlways {
		policy = v1.RestartPolicyOnFailure // init containers rerun only on failure
	}
	if !shouldRestart(policy, p.exit.Code) {
		c.noMore = true
		if c.init {
			// A failed init container under restartPolicy Never fails the pod.
			for _, o := range w.containers {
				o.noMore = true
			}
		}
		return
	}
	if p.exit.Finished.Sub(p.started) >= backoffReset {
		c.restarts = 0
	}
	delay := restartDelay(c.restarts)
	c.restarts++
	c.nextTry = w.a.clock.Now().Add(delay)
	c.view.LastState = v1.ContainerState{Terminated: t}
	if delay > 0 {
		c.view.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", delay, c.spec.Name, w.pod.Name, w.pod.Namespace, w.uid),
		}}
	}
}

// readinessLoop probes a container run every period and posts changes of
// its readiness result. It keeps going while the pod terminates, as the
// kubelet's readiness workers do, and stops when the run ends.
func (w *podWorker) readinessLoop(ctx context.Context, c *container, run int, started time.Time) {
	probe := c.spec.ReadinessProbe
	pp := paramsOf(probe)
	var st probeState
	ticker := time.NewTicker(pp.Period)
	defer ticker.Stop()
	last := false
	for {
		if time.Since(started) >= pp.InitialDelay {
			err := w.probeOnce(ctx, c, probe, pp.Timeout)
			if ctx.Err() != nil {
				return
			}
			ready := st.observe(err == nil, pp)
			if ready != last {
				last = ready
				w.log.Info("readiness", "container", c.spec.Name, "ready", ready, "err", err)
				w.post(ctx, func() {
					if c.run == run && c.proc != nil {
						c.view.Ready = ready
					}
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (w *podWorker) probeOnce(ctx context.Context, c *container, p *v1.Probe, timeout time.Duration) error {
	switch {
	case p.HTTPGet != nil:
		if err := checkTarget(p.HTTPGet.Host, w.a.podCIDR); err != nil {
			return err
		}
		return httpGet(ctx, p.HTTPGet, &c.spec, w.podIP, probeUserAgent, timeout)
	case p.TCPSocket != nil:
		if err := checkTarget(p.TCPSocket.Host, w.a.podCIDR); err != nil {
			return err
		}
		return tcpConnect(ctx, p.TCPSocket, &c.spec, w.podIP, timeout)
	case p.Exec != nil:
		return w.execIn(ctx, c, p.Exec.Command, timeout)
	}
	return errNoAction
}

// execIn runs command inside the container's namespaces and user, like a
// CRI ExecSync, and fails on a non-zero exit or at the timeout.
func (w *podWorker) execIn(ctx context.Context, c *container, command []string, timeout time.Duration) error {
	info := podRuntimeInfo{PodIP: w.podIP, HostIP: w.a.hostIP}
	env, err := containerEnv(ctx, w.a.client, w.pod, &c.spec, info)
	if err != nil {
		return err
	}
	cc := c.spec
	cc.Command, cc.Args = command, nil
	path, argv, err := containerCommand(w.a.cfg.BinDir, &cc, env)
	if err != nil {
		return err
	}
	spec := shimSpec{NetNS: w.nsPath, Hostname: w.pod.Name, Path: path, Args: argv, Env: env, Dir: c.spec.WorkingDir}
	if err := applySecurity(&spec, w.pod, &c.spec); err != nil {
		return err
	}
	spec.ReadOnlyRoot = false
	p, err := startProc(w.a.shimPath, spec, c.logFile)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("exec %q timed out after %s", command, timeout)
	case <-ctx.Done():
		p.signal(syscall.SIGKILL)
		<-p.done
		return ctx.Err()
	}
	if p.exit.Code != 0 {
		return fmt.Errorf("exec %q exited %d", command, p.exit.Code)
	}
	return nil
}

// nextWake is when the loop must look again without an event.
func (w *podWorker) nextWake() time.Duration {
	d := time.Hour
	now := w.a.clock.Now()
	if w.termStart.IsZero() {
		for _, c := range w.containers {
			if c.proc == nil && !c.noMore {
				d = min(d, max(c.nextTry.Sub(now), 10*time.Millisecond))
			}
		}
	}
	return d
}

// doneRunning reports whether, outside termination, every container has
// exited for good (restartPolicy Never/OnFailure).
func (w *podWorker) doneRunning() bool {
	if !w.termStart.IsZero() || len(w.containers) == 0 {
		return false
	}
	for _, c := range w.containers {
		if c.proc != nil || !c.noMore {
			return false
		}
	}
	return true
}

// finishedTermination reports whether termination began and every
// container process is gone.
func (w *podWorker) finishedTermination() bool {
	if w.termStart.IsZero() {
		return false
	}
	for _, c := range w.containers {
		if c.proc != nil {
			return false
		}
	}
	return true
}

// view is the pod as buildStatus sees it.
func (w *podWorker) view() podView {
	v := podView{HostIP: w.a.hostIP, PodIP: w.podIP, StartTime: w.started, NetworkReady: w.nsPath != "", Terminal: w.terminal, InitDone: w.initDone()}
	for _, c := range w.containers {
		if c.init {
			v.InitContainers = append(v.InitContainers, c.view)
			continue
		}
		v.Containers = append(v.Containers, c.view)
	}
	w.conds = updateConditions(w.conds, wantConditions(v), w.a.clock.Now())
	v.Conditions = w.conds
	return v
}

// publish hands the current status to the status syncer.
func (w *podWorker) publish() {
	w.status.set(buildStatus(w.view()))
}

// teardownNetwork removes the pod's network (CNI DEL, namespace).
func (w *podWorker) teardownNetwork() {
	if w.nsPath == "" && w.podIP == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w.mu.Lock()
	w.ns = ""
	w.mu.Unlock()
	if err := w.a.net.del(ctx, w.nodeName(), string(w.uid)); err != nil {
		w.log.Error("remove pod network", "err", err)
	}
	w.nsPath = ""
}

func (w *podWorker) nodeName() string {
	if w.pod != nil {
		return w.pod.Spec.NodeName
	}
	return w.status.pod.Spec.NodeName
}

// shutdown is the agent stopping: kill everything now, remove the network,
// leave the API alone.
func (w *podWorker) shutdown() {
	w.status.stop()
	for _, c := range w.containers {
		if c.stopProb != nil {
			c.stopProb()
		}
		if c.proc != nil {
			c.proc.signal(syscall.SIGKILL)
		}
	}
	for _, c := range w.containers {
		if c.proc != nil {
			select {
			case <-c.proc.done:
			case <-time.After(10 * time.Second):
				w.log.Error("container did not die after SIGKILL", "container", c.spec.Name)
			}
		}
	}
	w.teardownNetwork()
}

// waitForDeletion idles a finished pod until it is deleted (then removes
// the object) or the agent stops.
func (w *podWorker) waitForDeletion(ctx context.Context) {
	for {
		w.mu.Lock()
		pod, gone := w.latest, w.gone
		w.mu.Unlock()
		if gone {
			w.status.stop()
			return
		}
		if pod.DeletionTimestamp != nil {
			w.status.stop()
			w.deleteObject(ctx)
			return
		}
		select {
		case <-ctx.Done():
			w.status.stop()
			return
		case <-w.notify:
		case f := <-w.events:
			f()
		}
	}
}

// deleteObject removes the pod object, as the kubelet's status manager
// does once the pod is terminal (pkg/kubelet/status/status_manager.go,
// syncPod: grace 0 with a UID precondition).
func (w *podWorker) deleteObject(ctx context.Context) {
	grace := int64(0)
	uid := w.uid
	pod := w.status.pod
	err := w.a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.log.Error("delete pod object", "err", err)
		return
	}
	w.log.Info("pod object deleted")
}

// statusSyncer writes the newest status of one pod to the API server,
// coalescing updates, as a strategic merge patch of the fields the agent
// owns (conditions merge by type, so the scheduler's PodScheduled stays).
type statusSyncer struct {
	a    *agent
	pod  *v1.Pod
	log  *slog.Logger
	mu   sync.Mutex
	want *v1.PodStatus
	sent *v1.PodStatus
	kick chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func newStatusSyncer(a *agent, pod *v1.Pod, log *slog.Logger) *statusSyncer {
	return &statusSyncer{a: a, pod: pod, log: log, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

func (s *statusSyncer) set(st v1.PodStatus) {
	s.mu.Lock()
	if s.want != nil && equality.Semantic.DeepEqual(*s.want, st) {
		s.mu.Unlock()
		return
	}
	s.want = &st
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *statusSyncer) run(ctx context.Context) {
	defer close(s.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		case <-s.kick:
		}
		for {
			s.mu.Lock()
			want := s.want
			s.mu.Unlock()
			if want == nil || (s.sent != nil && equality.Semantic.DeepEqual(*want, *s.sent)) {
				break
			}
			err := s.patch(ctx, want)
			if err == nil || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
				if err != nil {
					s.log.Error("pod status", "err", err)
				}
				s.sent = want
				continue
			}
			s.log.Error("pod status (retrying)", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-s.quit:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// stop ends the syncer and waits for a write in flight.
func (s *statusSyncer) stop() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

// flush writes the newest status now (after stop).
func (s *statusSyncer) flush(ctx context.Context) error {
	s.mu.Lock()
	want := s.want
	s.mu.Unlock()
	if want == nil {
		return nil
	}
	var err error
	for i := 0; i < 5; i++ {
		if err = s.patch(ctx, want); err == nil || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

func (s *statusSyncer) patch(ctx context.Context, st *v1.PodStatus) error {
	b, err := statusPatch(s.pod.UID, st)
	if err != nil {
		return err
	}
	_, err = s.a.client.CoreV1().Pods(s.pod.Namespace).Patch(ctx, s.pod.Name, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status")
	return err
}

// statusPatch is the strategic merge patch that sets st on the pod with
// uid (the UID in the patch makes it fail on a same-named successor).
func statusPatch(uid types.UID, st *v1.PodStatus) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status":   st,
	})
}
