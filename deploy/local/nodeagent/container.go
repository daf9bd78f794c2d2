package nodeagent

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startDue starts every container whose (re)start is due, in the kubelet's
// order (kuberuntime_container.go, computeInitContainerActions): each init
// container waits for the one before it, a regular one until it exited 0,
// a sidecar until it started (its startup probe passed, else once it
// runs); the containers start once every init container did so. A sidecar
// that exits after that is restarted without holding anything back.
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
		if c.init && c.done && !c.sidecar {
			continue
		}
		if c.proc == nil && !c.noMore && !now.Before(c.nextTry) {
			if err := w.start(ctx, c); err != nil {
				w.log.Error("start container", "container", c.spec.Name, "err", err)
				c.view.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}
				c.nextTry = now.Add(10 * time.Second)
			}
		}
		if c.init && !c.done {
			return // the next one waits for this one
		}
	}
}

// initDone reports whether every regular init container has exited 0 and
// every sidecar has started.
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
	svcEnv, err := w.serviceEnv(ctx)
	if err != nil {
		return err
	}
	info := podRuntimeInfo{PodIP: w.podIP, HostIP: w.a.hostIP, ServiceEnv: svcEnv}
	env, err := containerEnv(ctx, w.a.client, w.pod, &c.spec, info)
	if err != nil {
		return err
	}
	if err := w.prepareVolumes(ctx); err != nil {
		return err
	}
	mounts, err := w.containerMounts(&c.spec)
	if err != nil {
		return err
	}
	path, argv, err := containerCommand(w.a.cfg.BinDir, &c.spec, env)
	if err != nil {
		return err
	}
	spec := shimSpec{NetNS: w.nsPath, Hostname: w.pod.Name, Path: path, Args: argv, Env: env, Dir: c.spec.WorkingDir, Mounts: mounts}
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
	if spec.ResolvConf, err = w.writePodDNS(); err != nil {
		return err
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
	c.view.Started = c.spec.StartupProbe == nil
	c.view.Ready = c.spec.ReadinessProbe == nil && c.spec.StartupProbe == nil
	c.done = c.done || c.sidecar && c.view.Started
	w.log.Info("container started", "container", c.spec.Name, "pid", p.cmd.Process.Pid, "path", path)
	pctx, cancel := context.WithCancel(ctx)
	c.stopProb = cancel
	go w.probers(pctx, c, c.run, p.started)
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
	c.killing = false
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
	if c.init && !c.sidecar && p.exit.Code == 0 {
		c.done, c.noMore = true, true
		return
	}
	policy := w.pod.Spec.RestartPolicy
	switch {
	case c.sidecar:
		// A sidecar restarts whatever the pod's policy
		// (computeInitContainerActions: an exited restartable init
		// container is always started again).
		policy = v1.RestartPolicyAlways
	case c.init && policy == v1.RestartPolicyAlways:
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

// probers runs a container run's probes as the kubelet's prober workers
// do (pkg/kubelet/prober/worker.go): the startup probe first, and only
// once it succeeded the readiness and liveness probes. A failed startup or
// liveness probe kills the container (preStop, SIGTERM, grace, SIGKILL)
// and the restart policy applies.
func (w *podWorker) probers(ctx context.Context, c *container, run int, started time.Time) {
	if p := c.spec.StartupProbe; p != nil {
		if !w.probeLoop(ctx, c, run, started, p, "startup", false) {
			return
		}
		w.post(ctx, func() {
			if c.run == run && c.proc != nil {
				c.view.Started = true
				c.view.Ready = c.spec.ReadinessProbe == nil
				c.done = c.done || c.sidecar
			}
		})
	}
	if p := c.spec.ReadinessProbe; p != nil {
		go w.probeLoop(ctx, c, run, started, p, "readiness", false)
	}
	if p := c.spec.LivenessProbe; p != nil {
		go w.probeLoop(ctx, c, run, started, p, "liveness", true)
	}
}

// probeLoop probes every period from the start of the run plus the
// initial delay, until ctx ends. Readiness results are posted as the
// container's Ready; a startup probe returns true at its first success;
// startup and liveness failures past the threshold kill the container.
// Readiness keeps going while the pod terminates; liveness and startup
// stop, as in the kubelet.
func (w *podWorker) probeLoop(ctx context.Context, c *container, run int, started time.Time, probe *v1.Probe, kind string, initial bool) bool {
	pp := paramsOf(probe)
	st := probeState{ready: initial}
	last := initial
	ticker := time.NewTicker(pp.Period)
	defer ticker.Stop()
	if kind != "readiness" {
		// The kubelet's first probe of a new container comes on its
		// worker's next tick, up to a period after the start. A startup
		// or liveness probe sent the instant the process starts would
		// find nothing listening and, at failureThreshold 1, kill it.
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
		}
	}
	for {
		if time.Since(started) >= pp.InitialDelay {
			err := w.probeOnce(ctx, c, probe, pp.Timeout)
			if ctx.Err() != nil {
				return false
			}
			ok := st.observe(err == nil, pp)
			switch {
			case kind == "startup" && ok:
				return true
			case kind == "readiness" && ok != last:
				w.log.Info("readiness", "container", c.spec.Name, "ready", ok, "err", err)
				w.post(ctx, func() {
					if c.run == run && c.proc != nil {
						c.view.Ready = ok
					}
				})
			case kind != "readiness" && !st.last && st.run >= pp.FailureThreshold:
				w.log.Info(kind+" probe failed: killing the container", "container", c.spec.Name, "err", err)
				w.post(ctx, func() { w.killForProbe(ctx, c, run, probe) })
				return false
			}
			last = ok
		}
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
		}
	}
}

// killForProbe kills a running container whose startup or liveness probe
// failed, with the probe's grace period if it sets one, else the pod's
// (kuberuntime_container.go, setTerminationGracePeriod).
func (w *podWorker) killForProbe(ctx context.Context, c *container, run int, probe *v1.Probe) {
	if c.run != run || c.proc == nil || c.killing || !w.termStart.IsZero() {
		return
	}
	grace := int64(minimumGracePeriod)
	if g := w.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	if probe.TerminationGracePeriodSeconds != nil {
		grace = *probe.TerminationGracePeriodSeconds
	}
	c.killing = true
	c.hurry = make(chan time.Time, 1)
	go w.kill(ctx, c, c.proc, grace, nil)
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
	// Read at the container's start, before this prober or hook ran.
	svcEnv := w.svcEnv
	info := podRuntimeInfo{PodIP: w.podIP, HostIP: w.a.hostIP, ServiceEnv: svcEnv}
	env, err := containerEnv(ctx, w.a.client, w.pod, &c.spec, info)
	if err != nil {
		return err
	}
	// The volumes were laid out before the container first started.
	mounts, err := w.containerMounts(&c.spec)
	if err != nil {
		return err
	}
	cc := c.spec
	cc.Command, cc.Args = command, nil
	path, argv, err := containerCommand(w.a.cfg.BinDir, &cc, env)
	if err != nil {
		return err
	}
	spec := shimSpec{NetNS: w.nsPath, Hostname: w.pod.Name, Path: path, Args: argv, Env: env, Dir: c.spec.WorkingDir, Mounts: mounts}
	if err := applySecurity(&spec, w.pod, &c.spec); err != nil {
		return err
	}
	p, err := startProc(w.a.shimPath, spec, os.DevNull) // exec output is not container log
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
