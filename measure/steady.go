package measure

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/epwindow/epwindow/deploy"
)

// steadyPods returns the probe pods that are Running, Ready and not
// terminating; with --target, the Deployment's pods whose sidecar started.
func (r *runner) steadyPods() ([]*corev1.Pod, error) {
	pods, err := r.watch.pods.Pods(r.ns).List(r.podSelector())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) && p.Status.PodIP != "" &&
			(r.target == nil || sidecarStarted(p)) {
			out = append(out, p)
		}
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// steadyPoll is how often waitSteady re-checks steady state.
const steadyPoll = 100 * time.Millisecond

// waitSteady waits until all replicas are Ready, ready in the slices, listed
// by every observed upstream, and each has served load since the wait began.
func (r *runner) waitSteady(ctx context.Context) error {
	start := r.cfg.Clock.Now()
	// Each runner's response count per probe pod at its first look: a pod
	// is steady on the ClusterIP path once some runner's count grew.
	base := map[string]int64{}
	return r.pollSteady(ctx, func() (string, error) {
		why := r.steadyState(start)
		if why != "" {
			return why, nil
		}
		pods, err := r.steadyPods()
		if err != nil {
			return "", err
		}
		return r.runnersSteady(ctx, pods, base)
	}, func(why string) error {
		return fmt.Errorf("no steady state after %s (--%s): %s", r.cfg.SettleTimeout, FlagSettle, why)
	})
}

// pollSteady calls check every steadyPoll until it says nothing is
// missing (""), reporting what is, and gives up with timedOut after the
// settle timeout.
func (r *runner) pollSteady(ctx context.Context, check func() (string, error), timedOut func(why string) error) error {
	deadline := r.cfg.Clock.NewTimer(r.cfg.SettleTimeout)
	defer deadline.Stop()
	tick := r.cfg.Clock.NewTicker(steadyPoll)
	defer tick.Stop()
	for {
		why, err := check()
		if err != nil {
			return err
		}
		if why == "" {
			return nil
		}
		r.report(Progress{Phase: "steady", Message: why})
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline.C():
			return timedOut(why)
		case <-tick.C():
		}
	}
}

// steadyState says what is missing for steady state, or "" when there.
func (r *runner) steadyState(since time.Time) string {
	pods, err := r.steadyPods()
	if err != nil {
		return err.Error()
	}
	if len(pods) != int(r.cfg.Replicas) {
		return fmt.Sprintf("%d of %d probe pods ready", len(pods), r.cfg.Replicas)
	}
	slices, err := r.watch.slices.EndpointSlices(r.ns).List(r.watch.sliceSel)
	if err != nil {
		return err.Error()
	}
	var addrs []netip.AddrPort
	for _, p := range pods {
		a, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			return fmt.Sprintf("pod %s has address %q", p.Name, p.Status.PodIP)
		}
		if st, ok := addressState(slices, a); !ok || !st.Ready {
			return fmt.Sprintf("pod %s (%s) not yet ready in the EndpointSlices", p.Name, a)
		}
		addrs = append(addrs, netip.AddrPortFrom(a, uint16(deploy.DefaultPort)))
		if ps, ok := r.gen.Pod(p.Name); !ok || ps.Last.Before(since) {
			return fmt.Sprintf("pod %s not yet receiving load through %s", p.Name, r.cfg.URL)
		}
	}
	if ok, why := r.tracker.Steady(addrs); !ok {
		return why
	}
	if r.dnsTracker != nil {
		if ok, why := r.dnsTracker.Steady(addrs); !ok {
			return why
		}
	}
	return ""
}
