package measure

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/results"
)

// rollouts restarts the Deployment (as kubectl rollout restart does) until
// at least cfg.Trials pods were replaced; every pod the Deployment
// controller deletes is a trial, followed from the watch's first sight of
// its deletion (T0) while the next ones overlap it. Each restart has a
// deadline (rolloutDeadline): a rollout the Deployment controller never
// finishes stops the run with an error instead of waiting forever.
func (r *runner) rollouts(ctx context.Context, sink Sink) error {
	cfg := r.cfg
	trial := 0
	for trial < cfg.Trials {
		pods, err := r.steadyPods()
		if err != nil {
			return err
		}
		old := map[types.UID]bool{}
		for _, p := range pods {
			old[p.UID] = true
		}
		r.watch.setFollow(func(p *corev1.Pod) bool { return old[p.UID] })
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`,
			deploy.LabelRunID+"-restarted-at", cfg.Clock.Now().UTC().Format(time.RFC3339Nano))
		r.report(Progress{Phase: "trial", Trial: trial + 1, Stage: "rollout", Message: "restarting the probe Deployment"})
		if _, err := cfg.Client.AppsV1().Deployments(r.ns).Patch(ctx, r.wl.Deployment.Name, types.StrategicMergePatchType,
			[]byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("restart deployment %s/%s (needs patch deployments): %w", r.ns, r.wl.Deployment.Name, err)
		}
		rctx, cancel := context.WithCancel(ctx)
		g, gctx := errgroup.WithContext(rctx)
		recs := make(chan *results.Record)
		limit := r.rolloutDeadline(len(old))
		deadline := time.NewTimer(limit)
		for pending := len(old); pending > 0; {
			for _, tw := range r.watch.takeFollowed() {
				trial++
				uid := tw.uid
				snap := r.watch.snapshot(uid)
				in := r.newInput(gctx, trial, snap.lastPod, snap.addr, r.startRunners(gctx))
				in.t0, in.rollout = snap.t0, true
				// The Deployment deletes an old pod once a new one is
				// available: the k-th deletion is the k-th new pod's.
				in.replacement, _ = r.watch.startups.claim(time.Time{})
				g.Go(func() error {
					rec, err := r.follow(gctx, in, uid)
					if rec != nil {
						select {
						case recs <- rec:
						case <-gctx.Done():
						}
					}
					return err
				})
			}
			select {
			case rec := <-recs:
				pending--
				if err := r.write(sink, rec); err != nil {
					deadline.Stop()
					cancel()
					return errors.Join(err, g.Wait())
				}
			case <-gctx.Done():
				deadline.Stop()
				cancel()
				return errors.Join(g.Wait(), context.Cause(gctx))
			case <-deadline.C:
				cancel()
				_ = g.Wait() // the follows end with the context: their error is this one
				r.watch.setFollow(nil)
				return fmt.Errorf("rollout of deployment %s/%s: %d of %d old pods not replaced and followed within %s (--%s %s + the grace period and 30s per pod): the Deployment controller did not finish the rollout",
					r.ns, r.wl.Deployment.Name, pending, len(old), limit, FlagSettle, cfg.SettleTimeout)
			case <-r.watch.changed:
			case <-r.cfg.Clock.After(pollEvery):
			}
		}
		deadline.Stop()
		r.watch.setFollow(nil)
		err = g.Wait()
		cancel()
		if err != nil {
			return err
		}
		if err := r.waitSteady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// rolloutDeadline bounds one restart of n pods: steady state for the
// replacements (--settle-timeout), and for each old pod its whole
// termination as follow allows it (the grace period and 30 s).
func (r *runner) rolloutDeadline(n int) time.Duration {
	return r.cfg.SettleTimeout + time.Duration(n)*(r.grace()+30*time.Second)
}
