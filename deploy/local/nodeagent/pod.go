package nodeagent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// container is the agent's record of one container of a pod.
type container struct {
	spec     v1.Container
	view     containerView
	init     bool // an init container: runs to completion before the others
	sidecar  bool // a restartable init container: runs beside the others
	done     bool // an init container that exited 0, or a sidecar that started once
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
	vols       map[string]podVolume // nil until prepareVolumes
	svcEnv     []v1.EnvVar          // the kubernetes Service's variables (serviceEnv)
	svcEnvRead bool
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
		c.sidecar = c.init && isSidecar(&c.spec)
		reason := "ContainerCreating"
		if inits > 0 {
			reason = "PodInitializing"
		}
		c.view = containerView{Name: c.spec.Name, Image: c.spec.Image, Sidecar: c.sidecar, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}}
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
			w.stopSidecarsWhenDone(ctx)
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
