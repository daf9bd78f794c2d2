package verify

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/measure/load"
)

// RestartAnnotation is what kubectl rollout restart sets on the pod
// template (kubectl pkg/polymorphichelpers/objectrestarter.go), to the
// time in RFC 3339. It is the only change verify makes to a Deployment.
const RestartAnnotation = "kubectl.kubernetes.io/restartedAt"

// restartPatch is the strategic merge patch that restarts a Deployment at
// now, as kubectl rollout restart does, and changes nothing else.
func restartPatch(now time.Time) []byte {
	return fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, RestartAnnotation, now.Format(time.RFC3339))
}

// rolloutComplete reports whether the Deployment's rollout is done, as
// kubectl rollout status decides it (kubectl
// pkg/polymorphichelpers/rollout_status.go): the controller saw the latest
// generation, every replica is updated and available, and no old one is
// left. failed is the Progressing condition's message when the progress
// deadline passed.
func rolloutComplete(d *appsv1.Deployment) (done bool, failed string) {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.Replicas == want &&
		st.AvailableReplicas == want, ""
}

// target is a Deployment under load: the team's, or the self-test's canary.
type target struct {
	ns, name string
	track    *tracker
	gen      *load.Generator
	// lag is how long an ingress may still route to a pod after its
	// address left the slices (attribution); tail how long a rollout's
	// failures are collected after its last replaced pod is gone.
	lag, tail time.Duration
	check     bool
	res       time.Duration
}

// pollEvery is how often the Deployment is read while a rollout runs.
const pollEvery = 250 * time.Millisecond

// rollout runs (or, with watch, waits for) one rollout of tg and reports it.
// started is called once the restart was sent: from then on the rollout is
// the Deployment controller's to finish, Ctrl-C or not.
func (r *runner) rollout(ctx context.Context, tg *target, n int, watch bool, started func()) (Rollout, error) {
	c := r.cfg.Client.AppsV1().Deployments(tg.ns)
	ro := Rollout{N: n}
	old := tg.track.alive()
	okBefore := tg.gen.Totals().OK
	begin := r.clk.Now()
	deadline := begin.Add(r.cfg.Timeout)

	if watch {
		d, err := c.Get(ctx, tg.name, metav1.GetOptions{})
		if err != nil {
			return ro, fmt.Errorf("get deployment %s/%s: %w", tg.ns, tg.name, err)
		}
		gen0 := d.Generation
		r.say("waiting for rollout %d of %s/%s to start elsewhere (--%s, up to --%s %s)", n, tg.ns, tg.name, FlagWatch, FlagTimeout, r.cfg.Timeout)
		for d.Generation == gen0 {
			if err := r.sleep(ctx, deadline); err != nil {
				return ro, fmt.Errorf("no rollout of %s/%s started within --%s %s: %w", tg.ns, tg.name, FlagTimeout, r.cfg.Timeout, err)
			}
			if d, err = c.Get(ctx, tg.name, metav1.GetOptions{}); err != nil {
				return ro, fmt.Errorf("get deployment %s/%s: %w", tg.ns, tg.name, err)
			}
		}
		// The replaced pods are those alive when the new generation was
		// seen; the wait may have been long.
		old = tg.track.alive()
		okBefore = tg.gen.Totals().OK
	} else {
		if err := ctx.Err(); err != nil {
			return ro, context.Cause(ctx)
		}
		// The patch is one request: it either happened or not. It runs to
		// its answer even on Ctrl-C, so verify always knows which.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, err := c.Patch(pctx, tg.name, types.StrategicMergePatchType, restartPatch(r.clk.Now()), metav1.PatchOptions{})
		cancel()
		if err != nil {
			return ro, fmt.Errorf("restart deployment %s/%s (patch %s): %w", tg.ns, tg.name, RestartAnnotation, err)
		}
		started()
	}
	ro.Started = r.clk.Now()
	r.say("rollout %d of %s/%s: started", n, tg.ns, tg.name)

	// Complete, as kubectl rollout status says.
	for {
		d, err := c.Get(ctx, tg.name, metav1.GetOptions{})
		if err != nil {
			return ro, fmt.Errorf("get deployment %s/%s: %w", tg.ns, tg.name, err)
		}
		done, failed := rolloutComplete(d)
		if done {
			ro.Complete = true
			ro.DurationNS = int64(r.clk.Since(ro.Started))
			break
		}
		if failed != "" {
			ro.Condition = failed
			break
		}
		if err := r.sleep(ctx, deadline); err != nil {
			if ctx.Err() != nil {
				return ro, context.Cause(ctx)
			}
			ro.Condition = fmt.Sprintf("not complete after --%s %s: %d of %d replicas updated, %d available",
				FlagTimeout, r.cfg.Timeout, d.Status.UpdatedReplicas, replicasOf(d), d.Status.AvailableReplicas)
			break
		}
	}
	// The replaced pods' exit codes are in their last status, before the
	// object goes.
	if ro.Complete {
		r.say("rollout %d of %s/%s: complete in %s; waiting for the replaced pods to go", n, tg.ns, tg.name, ro.Duration().Round(time.Millisecond))
		for !allGone(tg.track.snapshot(), old) {
			if err := r.sleep(ctx, deadline); err != nil {
				if ctx.Err() != nil {
					return ro, context.Cause(ctx)
				}
				ro.Condition = fmt.Sprintf("replaced pods still terminating after --%s %s", FlagTimeout, r.cfg.Timeout)
				ro.Complete = false
				break
			}
		}
		if ro.Complete {
			ro.DrainedNS = int64(r.clk.Since(ro.Started))
		}
	}
	// Failures after the last pod went still belong to this rollout while
	// the ingress may route to a vanished address; requests in flight are
	// filed under their scheduled instant once they end.
	end := r.clk.Now().Add(tg.tail)
	if err := r.sleep(ctx, end); err != nil && ctx.Err() != nil {
		return ro, context.Cause(ctx)
	}
	if err := tg.gen.Settle(ctx, end); err != nil {
		return ro, err
	}
	r.collect(&ro, tg, old, begin, end, okBefore)
	return ro, nil
}

func replicasOf(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}

func allGone(now, old map[types.UID]podState) bool {
	for uid := range old {
		if p, ok := now[uid]; ok && p.gone.IsZero() {
			return false
		}
	}
	return true
}

// collect fills the rollout's outcomes, failures, exits and port checks
// from the load in [begin, end) and the pods' states.
func (r *runner) collect(ro *Rollout, tg *target, old map[types.UID]podState, begin, end time.Time, okBefore int64) {
	pods := tg.track.snapshot()
	var times []podTimes
	for uid, p := range pods {
		pt := podTimes{Name: p.name, Checked: tg.check, FirstAnswer: p.firstAnswer, FirstRefusal: refusedBy(p)}
		switch _, wasOld := old[uid]; {
		case wasOld:
			pt.Deleted, pt.LeftSlices = p.deleted, p.leftSlices
			ro.Exits = append(ro.Exits, p.exits...)
			if tg.check && !p.deleted.IsZero() {
				ro.Ports = append(ro.Ports, portCheck(p))
			}
		case !p.seen.Before(begin):
			pt.Ready = p.ready
			// A new pod deleted in the same rollout (a surge pod) is a
			// shutdown candidate too.
			pt.Deleted, pt.LeftSlices = p.deleted, p.leftSlices
		default:
			continue
		}
		times = append(times, pt)
	}
	sort.Slice(ro.Exits, func(i, j int) bool { return ro.Exits[i].Pod < ro.Exits[j].Pod })
	sort.Slice(ro.Ports, func(i, j int) bool { return ro.Ports[i].Pod < ro.Ports[j].Pod })

	ro.Outcomes = Outcomes{Failed: map[string]int{}}
	for _, f := range tg.gen.FailureEvents(begin, end) {
		switch f.Kind {
		case load.KindUnattributed:
			// A 2xx without the probe's header: a team's app answers so.
			continue
		case load.KindDropped:
			ro.Outcomes.Dropped++
			continue
		}
		ro.Outcomes.Failed[f.Kind]++
		a := attribute(f.At, times, tg.res, tg.lag)
		ro.Failures = append(ro.Failures, Failure{AtNS: int64(f.At.Sub(begin)), Kind: f.Kind, Side: a.Side, Pod: a.Pod,
			SinceNS: int64(a.Since), Basis: a.Basis})
	}
	if len(ro.Outcomes.Failed) == 0 {
		ro.Outcomes.Failed = nil
	}
	ro.Outcomes.OK = tg.gen.Totals().OK - okBefore
}

// refusedBy is the first instant a deleted pod did not answer: its first
// failed read, else its object's removal (the kubelet removes it only after
// every container exited and the pod's network is gone), which a pod that
// exits at SIGTERM can reach before the next read.
func refusedBy(p podState) time.Time {
	if p.firstRefusal.IsZero() && !p.deleted.IsZero() {
		return p.gone
	}
	return p.firstRefusal
}

// portCheck is the mechanism check of one replaced pod.
func portCheck(p podState) PortCheck {
	pc := PortCheck{Pod: p.name, Seen: !p.leftSlices.IsZero(), Error: p.refusalErr}
	if p.firstRefusal.IsZero() && !p.gone.IsZero() {
		pc.Error = "gone (its object deleted) before a read failed"
	}
	if pc.Seen {
		pc.LeftSlicesNS = int64(p.leftSlices.Sub(p.deleted))
	}
	if !p.lastAnswer.IsZero() && !p.lastAnswer.Before(p.deleted) {
		d := int64(p.lastAnswer.Sub(p.deleted))
		pc.LastAnswerNS = &d
	}
	if r := refusedBy(p); !r.IsZero() {
		d := int64(r.Sub(p.deleted))
		pc.RefusedNS = &d
	}
	return pc
}

// readyReplicas counts the Deployment's pods that are Ready.
func readyReplicas(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if pods[i].DeletionTimestamp == nil && podReady(&pods[i]) {
			n++
		}
	}
	return n
}
