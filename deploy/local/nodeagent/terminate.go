package nodeagent

import (
	"context"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
)

// beginTermination starts killing the pod's containers when its deletion
// is first seen, and shortens the wait when a later deletion (or a force
// delete, pod gone from the API) asks for less time.
func (w *podWorker) beginTermination(ctx context.Context) {
	now := w.a.clock.Now()
	grace := int64(0)
	if w.pod != nil {
		grace = podGracePeriod(w.pod)
	}
	if !w.termStart.IsZero() {
		if w.pod != nil && grace >= w.grace {
			return
		}
		// A shorter grace period (or a force delete): everything must be
		// dead by now + the new grace (at least the 2 s minimum), unless
		// an earlier deadline was already set.
		w.grace = min(grace, w.grace)
		by := now.Add(time.Duration(max(grace, minimumGracePeriod)) * time.Second)
		if !w.killBy.IsZero() && !by.Before(w.killBy) {
			return
		}
		w.killBy = by
		for _, c := range w.containers {
			if c.killing {
				select {
				case c.hurry <- by:
				default:
				}
			}
		}
		return
	}
	w.termStart, w.grace = now, grace
	w.log.Info("terminating", "grace_s", grace)
	w.killAll(ctx, w.containers, grace)
}

// killAll kills the running containers of cs, all at once but for the
// sidecars' SIGTERM, which waits its turn (terminationTurns), as the
// kubelet's killContainersWithSyncResult does
// (pkg/kubelet/kuberuntime/kuberuntime_container.go). None of cs starts
// again.
func (w *podWorker) killAll(ctx context.Context, cs []*container, grace int64) {
	turns := terminationTurns(cs)
	for i, c := range cs {
		c.noMore = true
		if c.killing {
			// Already being killed (a failed liveness probe): that kill
			// ends it; a shorter deadline reaches it through c.hurry.
			continue
		}
		if c.proc == nil {
			if c.view.State.Waiting != nil {
				// Never started, or waiting to restart: report the
				// last run (or nothing) as terminated now.
				c.view.State = v1.ContainerState{Terminated: lastOrNever(c)}
			}
			continue
		}
		c.killing = true
		c.hurry = make(chan time.Time, 1)
		go w.kill(ctx, c, c.proc, grace, turns[i])
	}
}

// terminationTurns is, for each of cs, what its SIGTERM waits for
// (pkg/kubelet/kuberuntime/kuberuntime_termination_order.go,
// newTerminationOrdering): a sidecar waits for the exit of every running
// regular container and of the running sidecar declared right after it,
// so sidecars stop after the app, in reverse order; the others wait for
// nothing. A sidecar not running has nothing to wait for, and is not
// waited for.
func terminationTurns(cs []*container) [][]<-chan struct{} {
	var mains []<-chan struct{}
	for _, c := range cs {
		if !c.init && c.proc != nil {
			mains = append(mains, c.proc.done)
		}
	}
	turns := make([][]<-chan struct{}, len(cs))
	var next *container // the sidecar declared after the one at hand
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		if !c.sidecar {
			continue
		}
		if c.proc != nil {
			turns[i] = append(turns[i], mains...)
			if next != nil && next.proc != nil {
				turns[i] = append(turns[i], next.proc.done)
			}
		}
		next = c
	}
	return turns
}

// stopSidecarsWhenDone ends a pod whose regular containers have all exited
// for good (restartPolicy Never or OnFailure, or a failed init container
// under Never): its sidecars are killed as at a deletion, with the pod's
// grace period, and never restarted (kuberuntime_manager.go,
// computePodActions: KillPod once no container is kept or started). The
// pod then turns terminal (doneRunning).
func (w *podWorker) stopSidecarsWhenDone(ctx context.Context) {
	var sidecars []*container
	for _, c := range w.containers {
		switch {
		case c.sidecar:
			if !c.noMore || c.proc != nil && !c.killing {
				sidecars = append(sidecars, c)
			}
		case c.proc != nil || !c.noMore:
			return
		}
	}
	if len(sidecars) == 0 {
		return
	}
	w.log.Info("containers done: stopping the sidecars")
	w.killAll(ctx, sidecars, podGracePeriod(w.pod))
}

// lastOrNever is the terminated state of a container that is not running
// when its pod terminates.
func lastOrNever(c *container) *v1.ContainerStateTerminated {
	if t := c.view.LastState.Terminated; t != nil {
		return t
	}
	return &v1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was terminated"}
}

// kill stops one container exactly as the kubelet does
// (pkg/kubelet/kuberuntime/kuberuntime_container.go, killContainer): the
// preStop hook runs for at most the grace period; a sidecar then waits
// for its turn (the exit of the processes in turn) for at most what is
// left; the rest of the grace period (whole seconds, at least 2 s) is the
// runtime's SIGTERM→SIGKILL wait. A shorter deadline arriving on c.hurry
// cuts any of these waits.
func (w *podWorker) kill(ctx context.Context, c *container, p *proc, grace int64, turn []<-chan struct{}) {
	hook := c.spec.Lifecycle != nil && c.spec.Lifecycle.PreStop != nil
	var by time.Time // shortened deadline, zero if none
	var hookTook, turnTook time.Duration
	if hook && grace > 0 {
		start := time.Now()
		by = w.preStop(ctx, c, p, grace)
		hookTook = time.Since(start)
	}
	if left := graceLeft(grace, hookTook); len(turn) > 0 && left > 0 {
		start := time.Now()
		by = waitTurn(c, p, turn, start.Add(time.Duration(left)*time.Second), by)
		turnTook = time.Since(start)
	}
	timeout := stopTimeout(grace, hookTook, turnTook)
	if !by.IsZero() {
		timeout = min(timeout, max(time.Until(by), 0))
	}
	w.log.Info("SIGTERM", "container", c.spec.Name, "sigkill_after", timeout)
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case by = <-c.hurry:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			t.Reset(max(time.Until(by), 0))
			continue
		case <-t.C:
		}
		break
	}
	w.log.Info("SIGKILL", "container", c.spec.Name, "after_grace_s", grace)
	p.signal(syscall.SIGKILL)
	<-p.done
}

// preStop runs the container's preStop hook for at most grace seconds, or
// until it exits, and returns the shortened deadline that came on c.hurry
// meanwhile (zero if none).
func (w *podWorker) preStop(ctx context.Context, c *container, p *proc, grace int64) time.Time {
	var by time.Time
	done := make(chan struct{})
	hctx, cancel := context.WithTimeout(ctx, time.Duration(grace)*time.Second)
	defer cancel()
	go func() {
		defer close(done)
		if err := w.runHook(hctx, c, c.spec.Lifecycle.PreStop, time.Duration(grace)*time.Second); err != nil {
			w.log.Warn("preStop hook failed", "container", c.spec.Name, "err", err)
		}
	}()
	w.log.Info("preStop hook running", "container", c.spec.Name)
	t := time.NewTimer(time.Duration(grace) * time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return by
		case <-t.C:
			w.log.Info("preStop hook not completed in grace period", "container", c.spec.Name)
			return by
		case by = <-c.hurry:
			if !t.Stop() {
				return by
			}
			t.Reset(time.Until(by))
		case <-p.done:
			return by
		}
	}
}

// waitTurn waits until every channel of turn is closed, or the deadline
// end (or a shortened one, by or from c.hurry) passes, or the container
// exits on its own (kuberuntime_termination_order.go, waitForTurn). It
// returns the shortened deadline, zero if none.
func waitTurn(c *container, p *proc, turn []<-chan struct{}, end, by time.Time) time.Time {
	for _, ch := range turn {
		for waiting := true; waiting; {
			if !by.IsZero() && by.Before(end) {
				end = by
			}
			t := time.NewTimer(time.Until(end))
			select {
			case <-ch:
				waiting = false
			case by = <-c.hurry:
			case <-p.done:
				t.Stop()
				return by
			case <-t.C:
				return by
			}
			t.Stop()
		}
	}
	return by
}

// runHook runs a lifecycle handler (pkg/kubelet/lifecycle/handlers.go):
// httpGet to the pod, sleep, or exec in the container.
func (w *podWorker) runHook(ctx context.Context, c *container, h *v1.LifecycleHandler, timeout time.Duration) error {
	switch {
	case h.HTTPGet != nil:
		if err := checkTarget(h.HTTPGet.Host, w.a.podCIDR); err != nil {
			return err
		}
		return httpGet(ctx, h.HTTPGet, &c.spec, w.podIP, hookUserAgent, timeout)
	case h.Sleep != nil:
		select {
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case h.Exec != nil:
		return w.execIn(ctx, c, h.Exec.Command, timeout)
	case h.TCPSocket != nil:
		if err := checkTarget(h.TCPSocket.Host, w.a.podCIDR); err != nil {
			return err
		}
		return tcpConnect(ctx, h.TCPSocket, &c.spec, w.podIP, timeout)
	}
	return errNoAction
}

// finish completes a terminated pod: network removed, terminal status
// written, then the object deleted (unless it is already gone).
func (w *podWorker) finish(ctx context.Context) {
	w.teardownNetwork()
	w.terminal = true
	w.status.stop()
	if w.pod == nil {
		w.log.Info("pod terminated (object already gone)")
		return
	}
	w.status.set(buildStatus(w.view()))
	if err := w.status.flush(ctx); err != nil {
		w.log.Error("final pod status", "err", err)
	}
	w.deleteObject(ctx)
}
