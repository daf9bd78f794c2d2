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
// its deletion (T0) while the next ones overlap it.
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
		g, gctx := errgroup.WithContext(ctx)
		recs := make(chan *results.Record)
		for pending := len(old); pending > 0; {
			for _, tw := range r.watch.takeFollowed() {
				trial++
				uid := tw.uid
				snap := r.watch.snapshot(uid)
				in := r.newInput(gctx, trial, snap.lastPod, snap.addr)
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
					return err
				}
			case <-gctx.Done():
				return errors.Join(g.Wait(), context.Cause(gctx))
			case <-r.watch.changed:
			case <-r.cfg.Clock.After(pollEvery):
			}
		}
		r.watch.setFollow(nil)
		if err := g.Wait(); err != nil {
			return err
		}
		if err := r.waitSteady(ctx); err != nil {
			return err
		}
	}
	return nil
}
