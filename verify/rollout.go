package verify

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
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
// pkg/polymorphichelpers/rollout_status.go, DeploymentStatusViewer): only
// once the controller has observed the latest generation are the
// Progressing condition and the counts read — a restart of a Deployment
// whose last rollout hit its deadline still carries the old condition
// until then. failed is the condition's message when the progress deadline
// passed.
func rolloutComplete(d *appsv1.Deployment) (done bool, failed string) {
	st := d.Status
	if st.ObservedGeneration < d.Generation {
		return false, ""
	}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	want := replicasOf(d)
	return st.UpdatedReplicas >= want && st.Replicas <= st.UpdatedReplicas && st.AvailableReplicas >= st.UpdatedReplicas, ""
}

// loadStats is what a rollout reads of its load (a *load.Generator).
type loadStats interface {
	Totals() load.Totals
	Settle(ctx context.Context, t time.Time) error
	FailureEvents(from, to time.Time) []load.Failure
}

// target is a Deployment under load: the team's, or the self-test's canary.
type target struct {
	ns, name string
	track    *tracker
	gen      loadStats
	// lag is how long an ingress may still route to a pod after its
	// address left the slices (attribution); tail how long a rollout's
	// failures are collected after its last replaced pod is gone.
	lag, tail time.Duration
	check     bool
	// sidecar: each replaced pod's window is read from its sidecar.
	sidecar bool
	res     time.Duration
	// from is where the next rollout's failures start: the end of the
	// previous rollout's tail (or of the baseline), so that every failed
	// request, by its scheduled instant, lands in exactly one rollout.
	from time.Time
	// watch is what --watch has seen of the Deployment: a rollout is a
	// change of the pod template from this one.
	watch *watchState
}

// watchState is the Deployment as --watch last saw it.
type watchState struct {
	gen  int64
	tmpl corev1.PodTemplateSpec
	// since is when the last read of the Deployment that still showed tmpl
	// was sent: the next template change came after it, so a pod deleted
	// before it was not replaced by that change. Zero: any deleted pod of
	// an older template may have been (a rollout in progress at start).
	since time.Time
	// inProgress: a template rollout was already running when verify
	// started; the first rollout waited for is that one.
	inProgress bool
}

// newWatchState reads what --watch follows from d, before the self-test, so
// a rollout that starts during the self-test is not missed. A rollout is in
// progress when pods of an older template are still there (or the
// controller has not yet seen the latest generation, which is confirmed
// after: see replaced).
func newWatchState(d *appsv1.Deployment) *watchState {
	st := d.Status
	return &watchState{gen: d.Generation, tmpl: *d.Spec.Template.DeepCopy(),
		inProgress: st.ObservedGeneration < d.Generation || st.UpdatedReplicas < st.Replicas}
}

// pollEvery is how often the Deployment is read while a rollout runs.
const pollEvery = 250 * time.Millisecond

// rollout runs (or, with watch, waits for) one rollout of tg and reports it.
// started is called once the restart was sent: from then on the rollout is
// the Deployment controller's to finish, Ctrl-C or not.
func (r *runner) rollout(ctx context.Context, tg *target, n int, started func()) (Rollout, error) {
	c := r.cfg.Client.AppsV1().Deployments(tg.ns)
	ro := Rollout{N: n}
	begin := r.clk.Now()
	deadline := begin.Add(r.cfg.Timeout)
	for {
		var old map[types.UID]podState
		var okBefore int64
		var since time.Time
		if tg.watch != nil {
			if err := r.waitTemplateChange(ctx, c, tg, n, deadline); err != nil {
				return ro, err
			}
			since = tg.watch.since
			okBefore = tg.gen.Totals().OK
		} else {
			// Before the restart every pod is of the current template (the
			// last rollout completed): those alive are the ones replaced.
			old = tg.track.alive()
			okBefore = tg.gen.Totals().OK
			if err := ctx.Err(); err != nil {
				return ro, context.Cause(ctx)
			}
			// The patch is one request: it either happened or not. It runs
			// to its answer even on Ctrl-C, so verify always knows which.
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
		d, err := r.waitComplete(ctx, c, tg, &ro, deadline)
		if err != nil {
			return ro, err
		}
		if tg.watch != nil {
			// The change was noticed up to a poll after it happened: the
			// new template's first pods may be there already. The replaced
			// pods are those of every other template.
			if old, err = r.replaced(ctx, tg, d, since); err != nil {
				return ro, err
			}
		}
		lastGone := r.clk.Now()
		if ro.Complete {
			if lastGone, err = r.waitGone(ctx, tg, &ro, old, deadline); err != nil {
				return ro, err
			}
		}
		if tg.watch != nil && ro.Complete && !anyDeleted(tg.track.snapshot(), old) {
			// The generation moved and the rollout completed, but no pod was
			// replaced (a scale, or a template changed and changed back
			// between two polls): not a rollout.
			r.say("rollout %d of %s/%s: no pod was replaced (a scale?); still waiting", n, tg.ns, tg.name)
			ro = Rollout{N: n}
			continue
		}
		// Failures after the last pod went still belong to this rollout
		// while the ingress may route to a vanished address: the whole tail
		// is waited for, then every request scheduled before its end has
		// its outcome (Settle), filed under its scheduled instant.
		end := lastGone.Add(tg.tail)
		if err := r.waitUntil(ctx, end); err != nil {
			return ro, err
		}
		if err := tg.gen.Settle(ctx, end); err != nil {
			return ro, err
		}
		from := tg.from
		if from.IsZero() {
			from = begin
		}
		tg.from = end
		r.collect(&ro, tg, old, from, end, okBefore)
		if ks := tg.gen.Totals().FailuresKeptSince; !ks.IsZero() && ks.After(from) {
			return ro, fmt.Errorf("rollout %d: the load generator's failure history overflowed (%d failures kept) and lost failures of this rollout: its count is incomplete, so the gate cannot decide; lower --%s or --%s",
				n, load.DefaultFailureHistory, FlagRate, FlagTimeout)
		}
		return ro, nil
	}
}

// waitTemplateChange waits (--watch) until the Deployment's pod template
// differs from the one last seen, or returns at once for a rollout already
// in progress when verify started. A new generation with the same template
// (an HPA or a person scaling) is remembered and waited past.
func (r *runner) waitTemplateChange(ctx context.Context, c deploymentGetter, tg *target, n int, deadline time.Time) error {
	w := tg.watch
	if w.inProgress {
		w.inProgress = false
		r.say("rollout %d of %s/%s: already in progress when verify started; following it", n, tg.ns, tg.name)
		return nil
	}
	r.say("waiting for rollout %d of %s/%s to start elsewhere (--%s, up to --%s %s)", n, tg.ns, tg.name, FlagWatch, FlagTimeout, r.cfg.Timeout)
	for {
		sent := r.clk.Now()
		d, err := c.Get(ctx, tg.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get deployment %s/%s: %w", tg.ns, tg.name, err)
		}
		if d.Generation != w.gen {
			changed := !apiequality.Semantic.DeepEqual(d.Spec.Template, w.tmpl)
			w.gen, w.tmpl = d.Generation, *d.Spec.Template.DeepCopy()
			if changed {
				return nil
			}
		}
		w.since = sent
		if err := r.sleep(ctx, deadline); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("no rollout of %s/%s started within --%s %s: %w", tg.ns, tg.name, FlagTimeout, r.cfg.Timeout, err)
		}
	}
}

// replaced is the pods a --watch rollout of d replaced: every pod not of
// its new ReplicaSet that was not deleted before since. Pods of an older
// template created during the rollout count too (a template changed twice
// within it: the controller scales the middle one down). When the new
// ReplicaSet is not found (a rollout that did not complete, its
// ReplicaSet not yet made), the pods not deleted before since are taken.
func (r *runner) replaced(ctx context.Context, tg *target, d *appsv1.Deployment, since time.Time) (map[types.UID]podState, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment %s/%s selector: %w", tg.ns, tg.name, err)
	}
	rss, err := r.cfg.Client.AppsV1().ReplicaSets(tg.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list replicasets of deployment %s/%s (the new template's pods are not replaced ones): %w", tg.ns, tg.name, err)
	}
	hash, _ := newReplicaSetHash(d, rss.Items)
	return replacedPods(tg.track.snapshot(), hash, since), nil
}

// newReplicaSetHash is the pod-template-hash of d's new ReplicaSet: the one
// d controls whose template is d's but for that label, as the Deployment
// controller finds it (pkg/controller/deployment/util/deployment_util.go,
// FindNewReplicaSet and EqualIgnoreHash).
func newReplicaSetHash(d *appsv1.Deployment, rss []appsv1.ReplicaSet) (string, bool) {
	for i := range rss {
		rs := &rss[i]
		if !metav1.IsControlledBy(rs, d) {
			continue
		}
		tmpl := rs.Spec.Template.DeepCopy()
		hash := tmpl.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		delete(tmpl.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
		if len(tmpl.Labels) == 0 {
			tmpl.Labels = nil
		}
		want := d.Spec.Template.DeepCopy()
		if len(want.Labels) == 0 {
			want.Labels = nil
		}
		if hash != "" && apiequality.Semantic.DeepEqual(*tmpl, *want) {
			return hash, true
		}
	}
	return "", false
}

// replacedPods are the pods of pods of a template other than newHash's
// ("": not known, so any) and not deleted before since. A pod without a
// pod-template-hash is no ReplicaSet's (one matching the selector by
// chance): the rollout does not replace it.
func replacedPods(pods map[types.UID]podState, newHash string, since time.Time) map[types.UID]podState {
	out := map[types.UID]podState{}
	for uid, p := range pods {
		if newHash != "" && (p.hash == newHash || p.hash == "") || !p.deleted.IsZero() && p.deleted.Before(since) {
			continue
		}
		out[uid] = p
	}
	return out
}

// deploymentGetter is the part of the Deployments client a rollout reads.
type deploymentGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.Deployment, error)
}

// waitComplete waits for the rollout to complete, as kubectl rollout
// status says, or fail, and returns the Deployment as last read. With
// --watch, the template it completed with is the one the next rollout
// changes (a second change within this rollout is this rollout's).
func (r *runner) waitComplete(ctx context.Context, c deploymentGetter, tg *target, ro *Rollout, deadline time.Time) (*appsv1.Deployment, error) {
	for {
		sent := r.clk.Now()
		d, err := c.Get(ctx, tg.name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get deployment %s/%s: %w", tg.ns, tg.name, err)
		}
		done, failed := rolloutComplete(d)
		if done {
			ro.Complete = true
			ro.DurationNS = int64(r.clk.Since(ro.Started))
			if w := tg.watch; w != nil {
				w.gen, w.tmpl, w.since = d.Generation, *d.Spec.Template.DeepCopy(), sent
			}
			return d, nil
		}
		if failed != "" {
			ro.Condition = failed
			return d, nil
		}
		if err := r.sleep(ctx, deadline); err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			ro.Condition = fmt.Sprintf("not complete after --%s %s: %d of %d replicas updated, %d available",
				FlagTimeout, r.cfg.Timeout, d.Status.UpdatedReplicas, replicasOf(d), d.Status.AvailableReplicas)
			return d, nil
		}
	}
}

// waitGone waits, after a complete rollout, for the replaced pods (old) to
// be gone, and returns when the last one went; when they are not gone by
// the deadline the rollout is not complete.
func (r *runner) waitGone(ctx context.Context, tg *target, ro *Rollout, old map[types.UID]podState, deadline time.Time) (time.Time, error) {
	// The replaced pods' exit codes are in their last status, before the
	// object goes.
	r.say("rollout %d of %s/%s: complete in %s; waiting for the replaced pods to go", ro.N, tg.ns, tg.name, ro.Duration().Round(time.Millisecond))
	for {
		if last, ok := lastGone(tg.track.snapshot(), old); ok {
			if last.IsZero() {
				last = r.clk.Now()
			}
			ro.DrainedNS = int64(last.Sub(ro.Started))
			return last, nil
		}
		if err := r.sleep(ctx, deadline); err != nil {
			if ctx.Err() != nil {
				return time.Time{}, context.Cause(ctx)
			}
			ro.Condition = fmt.Sprintf("replaced pods still terminating after --%s %s", FlagTimeout, r.cfg.Timeout)
			ro.Complete = false
			return r.clk.Now(), nil
		}
	}
}

// waitUntil waits until the clock reaches t, or ctx ends.
func (r *runner) waitUntil(ctx context.Context, t time.Time) error {
	for {
		left := t.Sub(r.clk.Now())
		if left <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-r.clk.After(left):
		}
	}
}

func replicasOf(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}

// lastGone reports whether every pod of old is gone, and when the last one
// went (the tracker's DELETED event).
func lastGone(now, old map[types.UID]podState) (time.Time, bool) {
	var last time.Time
	for uid := range old {
		p, ok := now[uid]
		if !ok {
			continue
		}
		if p.gone.IsZero() {
			return time.Time{}, false
		}
		if p.gone.After(last) {
			last = p.gone
		}
	}
	return last, true
}

// anyDeleted reports whether a pod of old was deleted.
func anyDeleted(now, old map[types.UID]podState) bool {
	for uid := range old {
		if p, ok := now[uid]; ok && !p.deleted.IsZero() {
			return true
		}
	}
	return false
}

// collect fills the rollout's outcomes, failures, exits and port checks
// from the load in [begin, end) and the pods' states. begin is where the
// previous rollout's (or the baseline's) window ended, so that every failed
// request counts in one rollout by its scheduled instant.
func (r *runner) collect(ro *Rollout, tg *target, old map[types.UID]podState, begin, end time.Time, okBefore int64) {
	pods := tg.track.snapshot()
	var times []podTimes
	for uid, p := range pods {
		pt := podTimes{Name: p.name, Checked: tg.check, FirstAnswer: p.firstAnswer, FirstRefusal: refusedBy(p)}
		switch _, wasOld := old[uid]; {
		case wasOld:
			pt.Deleted, pt.LeftSlices = p.deleted, p.leftSlices
			for _, e := range p.exits {
				e.NeverReady = p.ready.IsZero()
				ro.Exits = append(ro.Exits, e)
			}
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
	base := ro.Started
	if base.IsZero() {
		base = begin
	}
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
		ro.Failures = append(ro.Failures, Failure{AtNS: int64(f.At.Sub(base)), Kind: f.Kind, Side: a.Side, Pod: a.Pod,
			SinceNS: int64(a.Since), Basis: a.Basis})
	}
	if len(ro.Outcomes.Failed) == 0 {
		ro.Outcomes.Failed = nil
	}
	ro.Outcomes.OK = tg.gen.Totals().OK - okBefore
	if tg.sidecar {
		ro.Windows = sidecarWindows(pods, old, ro.Failures)
	}
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
