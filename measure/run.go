package measure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// probeContainer is the probe's container name in the embedded manifests.
const probeContainer = "probe"

// Sink receives a run's results as they are produced: the header once the
// workload is up, then each trial as it ends (so an interrupted run keeps
// every finished trial).
type Sink interface {
	Header(*results.Header) error
	Trial(*results.Record) error
}

// Progress is what a run reports while it works, for a progress line.
type Progress struct {
	// Phase is "setup", "steady", "trial" or "cleanup".
	Phase  string
	Trial  int
	Trials int
	// Stage is the latest stage seen in the current trial.
	Stage string
	// LastWindow is the previous valid trial's window.
	LastWindow time.Duration
	// Message says what the run waits for, in words.
	Message string
}

// runner is one run's state.
type runner struct {
	cfg       Config
	ns        string
	runID     string
	made      created
	wl        *deploy.Workload
	watch     *watcher
	obs       upstream.Observer
	choice    upstream.Choice
	tracker   *upstream.Tracker
	heartbeat *heartbeat
	gen       *load.Generator
	probes    probeClient
	progress  func(Progress)

	pmu  sync.Mutex // rollout trials report concurrently
	last Progress
}

// Run measures cfg.Trials trials and hands each to sink. Whatever happens —
// success, error or ctx cancelled (Ctrl-C) — it deletes what it created
// (its namespace, or with cfg.Namespace its objects there), unless
// cfg.Keep, and it never deletes or changes anything else.
func Run(ctx context.Context, cfg Config, sink Sink, progress func(Progress)) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Client == nil {
		return errors.New("no cluster client: check --kubeconfig / --context")
	}
	if progress == nil {
		progress = func(Progress) {}
	}
	r := &runner{cfg: cfg, progress: progress, runID: newRunID()}
	name := "probe"
	r.ns = "epwindow-" + r.runID
	if cfg.Namespace != "" {
		// In a namespace shared with other workloads, the run's objects are
		// named by its id, so they cannot collide with anything there.
		r.ns, name = cfg.Namespace, "epwindow-"+r.runID
	}
	r.last = Progress{Trials: cfg.Trials}
	// Set before anything is created: cleanup releases probes through it,
	// also after a create cut short by Ctrl-C.
	r.probes = probeClient{client: cfg.Client, ns: r.ns, port: deploy.DefaultPort}

	serverVersion := ""
	if v, verr := cfg.Client.Discovery().ServerVersion(); verr == nil {
		serverVersion = v.GitVersion
	} else {
		return fmt.Errorf("reach the API server (check --kubeconfig / --context): %w", verr)
	}

	wl, err := deploy.Render(deploy.Params{
		Namespace: r.ns, Name: name, Replicas: cfg.Replicas, Image: cfg.Image,
		IngressClass: cfg.IngressClass, Host: cfg.Host, Hold: cfg.Hold, GraceMargin: cfg.GraceMargin,
		Overlay: cfg.Overlay, Labels: cfg.Labels,
		PreStop: cfg.PreStop, PreStopSleep: cfg.PreStopSleep, ExitOnSigterm: cfg.ExitOnSigterm,
		ClockOffset: cfg.ProbeClockOffset, RunID: r.runID,
	})
	if err != nil {
		return fmt.Errorf("render the probe workload: %w", err)
	}
	r.wl = wl

	// The observer is built before anything is created, so a wrong
	// --observer or an unreachable controller fails with nothing to undo.
	target := upstream.Target{Namespace: r.ns, Service: wl.Service.Name, Port: wl.Service.Spec.Ports[0].Port,
		Ingress: wl.Ingress.Name, Host: cfg.Host}
	r.obs, r.choice, err = upstream.New(ctx, cfg.Observer, upstream.Deps{Client: cfg.Client, Config: cfg.RESTConfig, Clock: cfg.Clock},
		target, cfg.ObserverOptions)
	if err != nil {
		return fmt.Errorf("--%s %s: %w", FlagObserver, cfg.Observer, err)
	}
	defer r.obs.Close()
	r.report(Progress{Phase: "setup", Message: "observer " + r.choice.String()})

	if r.ownNamespace() {
		r.report(Progress{Phase: "setup", Message: "creating namespace " + r.ns})
	} else {
		if labels := namespaceLabels(wl.Namespace); labels != "" {
			r.report(Progress{Phase: "setup", Message: "namespace " + r.ns + " is used as it is; the manifests' Namespace would carry " + labels})
		}
		r.report(Progress{Phase: "setup", Message: "creating " + name + " in namespace " + r.ns})
	}
	if err := r.create(ctx); err != nil {
		return errors.Join(err, r.cleanup())
	}
	defer func() {
		if cerr := r.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	g, gctx := errgroup.WithContext(ctx)
	runErr := r.measure(gctx, g, sink, serverVersion)
	if runErr != nil {
		// Stop the background loops; their errors are secondary.
		return errors.Join(runErr, context.Cause(gctx))
	}
	return nil
}

// namespaceLabels lists the labels of the rendered Namespace that are not
// epwindow's bookkeeping (Pod Security, an overlay's, e.g. the ALB
// controller's readiness-gate injection), for a run in an existing
// namespace, which does not apply them.
func namespaceLabels(ns *corev1.Namespace) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(ns.Labels)) {
		switch k {
		case deploy.LabelName, deploy.LabelInstance, deploy.LabelManagedBy, deploy.LabelRunID:
			continue
		}
		out = append(out, k+"="+ns.Labels[k])
	}
	return strings.Join(out, ", ")
}

func newRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *runner) report(p Progress) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if p.Trials == 0 {
		p.Trials = r.cfg.Trials
	}
	if p.LastWindow == 0 {
		p.LastWindow = r.last.LastWindow
	}
	if p.Trial == 0 {
		p.Trial = r.last.Trial
	}
	r.last = p
	r.progress(p)
}

// createTimeout bounds one create request. Creates run on a context that
// Ctrl-C does not cancel, so that the run always learns whether an object
// exists (and its UID) before it cleans up; the run checks ctx between
// them.
const createTimeout = 30 * time.Second

// created is what the run made in an existing namespace, for cleanup (in
// its own namespace the namespace goes with everything in it): UIDs once
// the API server confirmed the create; names are r.wl's.
type created struct {
	service, deployment, ingress types.UID
}

// create makes the namespace (unless the run uses an existing one), the
// Service, the Deployment and the Ingress. Everything carries the run id;
// nothing is created outside r.ns.
func (r *runner) create(ctx context.Context) (err error) {
	c := r.cfg.Client
	call := func(what string, f func(context.Context) (types.UID, error)) (types.UID, error) {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("create %s: %w", what, context.Cause(ctx))
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
		defer cancel()
		id, err := f(cctx)
		if err != nil {
			if apierrors.IsNotFound(err) && r.cfg.Namespace != "" {
				return "", fmt.Errorf("create %s: namespace %s does not exist (--%s names an existing namespace; an administrator creates it, e.g. kubectl apply -k deploy/rbac/namespaced): %w",
					what, r.ns, FlagNamespace, err)
			}
			return "", fmt.Errorf("create %s: %w", what, err)
		}
		return id, nil
	}
	if r.ownNamespace() {
		if _, err := call("namespace "+r.ns+" (needs create namespaces)", func(ctx context.Context) (types.UID, error) {
			return uidOf(c.CoreV1().Namespaces().Create(ctx, r.wl.Namespace, metav1.CreateOptions{}))
		}); err != nil {
			return err
		}
	}
	name := r.wl.Deployment.Name
	if r.made.service, err = call("service "+r.ns+"/"+name, func(ctx context.Context) (types.UID, error) {
		return uidOf(c.CoreV1().Services(r.ns).Create(ctx, r.wl.Service, metav1.CreateOptions{}))
	}); err != nil {
		return err
	}
	if r.made.deployment, err = call("deployment "+r.ns+"/"+name, func(ctx context.Context) (types.UID, error) {
		return uidOf(c.AppsV1().Deployments(r.ns).Create(ctx, r.wl.Deployment, metav1.CreateOptions{}))
	}); err != nil {
		return err
	}
	r.made.ingress, err = call("ingress "+r.ns+"/"+name, func(ctx context.Context) (types.UID, error) {
		return uidOf(c.NetworkingV1().Ingresses(r.ns).Create(ctx, r.wl.Ingress, metav1.CreateOptions{}))
	})
	return err
}

func uidOf[T interface{ GetUID() types.UID }](o T, err error) (types.UID, error) {
	if err != nil {
		return "", err
	}
	return o.GetUID(), nil
}

// ownNamespace reports whether the run created r.ns (and deletes it).
func (r *runner) ownNamespace() bool { return r.cfg.Namespace == "" }

// cleanupTimeout bounds the whole cleanup.
const cleanupTimeout = 2 * time.Minute

// cleanup deletes what the run created and waits until its pods are gone, on
// a context of its own so that it also runs after Ctrl-C. Probe pods are
// released and deleted with a short grace first, so nothing waits out the
// long measuring grace period. In its own namespace it deletes the namespace;
// in an existing one (--namespace) exactly its Deployment, Service and
// Ingress, each by name and, when known, UID.
func (r *runner) cleanup() error {
	what := "namespace " + r.ns
	if !r.ownNamespace() {
		what = fmt.Sprintf("deployment, service and ingress %s in namespace %s", r.wl.Deployment.Name, r.ns)
	}
	if r.cfg.Keep {
		r.report(Progress{Phase: "cleanup", Message: "keeping " + what + " (--keep)"})
		return nil
	}
	r.report(Progress{Phase: "cleanup", Message: "deleting " + what})
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if r.ownNamespace() {
		return r.deleteNamespace(ctx)
	}
	return r.deleteObjects(ctx)
}

func (r *runner) deleteNamespace(ctx context.Context) error {
	c := r.cfg.Client
	ns, err := c.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean up: get namespace %s: %w", r.ns, err)
	}
	if ns.Labels[deploy.LabelManagedBy] != deploy.ManagedByValue || ns.Labels[deploy.LabelRunID] != r.runID {
		// Never delete what this run did not create.
		return fmt.Errorf("clean up: namespace %s is not this run's (labels %v); left alone", r.ns, ns.Labels)
	}
	_ = c.AppsV1().Deployments(r.ns).Delete(ctx, r.wl.Deployment.Name, metav1.DeleteOptions{})
	r.releasePods(ctx, map[types.UID]bool{})
	uid := ns.UID
	if err := c.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("clean up: delete namespace %s (delete it by hand: kubectl delete namespace %s): %w", r.ns, r.ns, err)
	}
	for {
		if _, err := c.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clean up: namespace %s still terminating after %s; it will go by itself (check: kubectl get namespace %s)", r.ns, cleanupTimeout, r.ns)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// deleteObjects removes the run's Deployment, Service and Ingress from an
// existing namespace and waits for its pods to go. The names carry the run
// id (epwindow-<id>), so no one else's object has them; the UID
// precondition, when the create's answer gave one, makes that certain.
func (r *runner) deleteObjects(ctx context.Context) error {
	c := r.cfg.Client
	name := r.wl.Deployment.Name
	opts := func(uid types.UID) metav1.DeleteOptions {
		bg := metav1.DeletePropagationBackground
		o := metav1.DeleteOptions{PropagationPolicy: &bg}
		if uid != "" {
			o.Preconditions = &metav1.Preconditions{UID: &uid}
		}
		return o
	}
	var errs []error
	gone := func(kind string, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("clean up: delete %s %s/%s (delete it by hand: kubectl -n %s delete %s %s): %w", kind, r.ns, name, r.ns, kind, name, err))
		}
	}
	// The Deployment first, so that its ReplicaSet (removed by the garbage
	// collector) stops replacing the pods released below.
	gone("deployment", c.AppsV1().Deployments(r.ns).Delete(ctx, name, opts(r.made.deployment)))
	gone("ingress", c.NetworkingV1().Ingresses(r.ns).Delete(ctx, name, opts(r.made.ingress)))
	gone("service", c.CoreV1().Services(r.ns).Delete(ctx, name, opts(r.made.service)))
	// Pods the ReplicaSet creates before the garbage collector removes it
	// are released on a later pass.
	seen := map[types.UID]bool{}
	for {
		if r.releasePods(ctx, seen) == 0 {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("clean up: probe pods still terminating in %s after %s; they go by themselves (check: kubectl -n %s get pods -l %s)",
				r.ns, cleanupTimeout, r.ns, r.podSelector()))...)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// releasePods ends the hold of every probe pod of the run not in done and
// deletes it with a 1 s grace; it returns how many of the run's pods still
// exist (-1 when they cannot be listed).
func (r *runner) releasePods(ctx context.Context, done map[types.UID]bool) int {
	c := r.cfg.Client
	pods, err := c.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: r.podSelector().String()})
	if err != nil {
		return -1
	}
	for _, p := range pods.Items {
		if done[p.UID] {
			continue
		}
		done[p.UID] = true
		_ = r.probes.release(ctx, p.Name)
		uid := p.UID
		_ = c.CoreV1().Pods(r.ns).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptrTo(int64(1)), Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	return len(pods.Items)
}

func ptrTo[T any](v T) *T { return &v }

// grace is the probe pods' terminationGracePeriodSeconds as rendered (the
// preStop sleep, the hold and the margin: deploy.Params.Grace).
func (r *runner) grace() time.Duration {
	if g := r.wl.Deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second // the API default
}

func (r *runner) podSelector() labels.Selector {
	return labels.SelectorFromSet(r.wl.Deployment.Spec.Selector.MatchLabels)
}

// measure starts the watches, the observer and the load, waits for steady
// state and runs the trials.
func (r *runner) measure(ctx context.Context, g *errgroup.Group, sink Sink, serverVersion string) error {
	cfg := r.cfg
	r.heartbeat = newHeartbeat(cfg.Client, cfg.Clock)
	g.Go(func() error { return r.heartbeat.run(ctx) })
	r.watch = newWatcher(cfg.Client, cfg.Clock, r.ns, r.podSelector(), r.wl.Service.Name)
	if err := r.watch.start(ctx); err != nil {
		return err
	}

	obs, choice := r.obs, r.choice
	r.tracker = upstream.NewTracker(obs, cfg.Clock, 0)
	g.Go(func() error { return r.tracker.Run(ctx) })

	gen, err := load.New(load.Config{URL: cfg.URL.String(), Host: cfg.Host, Rate: cfg.Rate, KeepAlive: cfg.KeepAlive,
		Timeout: cfg.LoadTimeout, MaxConns: cfg.LoadMaxConns, Method: cfg.LoadMethod}, cfg.Clock)
	if err != nil {
		return err
	}
	r.gen = gen
	g.Go(func() error { return gen.Run(ctx) })

	if err := r.waitSteady(ctx, nil); err != nil {
		return err
	}
	h := &results.Header{
		Kind: results.KindHeader, Schema: results.SchemaVersion, ToolVersion: cfg.ToolVersion,
		StartedAt: cfg.Clock.Now(), ServerVersion: serverVersion, Cluster: cfg.ClusterName,
		Ingress: results.Ingress{Class: cfg.IngressClass, Controller: choice.Controller, Settings: obs.Settings(ctx)},
		Mode:    string(cfg.Mode), Namespace: r.ns, Replicas: int(cfg.Replicas), Rate: cfg.Rate, Keepalive: cfg.KeepAlive,
		DrainNS: int64(cfg.Drain), Flags: cfg.Flags,
	}
	if obs.Name() != upstream.KindNone {
		h.Observers = []results.Observer{{Name: obs.Name(), ResolutionNS: int64(obs.Resolution()), Settings: obs.Settings(ctx)}}
	}
	if err := sink.Header(h); err != nil {
		return fmt.Errorf("write results header: %w", err)
	}

	if cfg.Mode == ModeRollout {
		return r.rollouts(ctx, sink)
	}
	pauses := trialPauses(cfg.Trials, cfg.TrialJitter, pauseRNG())
	for i := 1; i <= cfg.Trials; i++ {
		if err := r.pause(ctx, pauses[i-1]); err != nil {
			return err
		}
		rec, err := r.trial(ctx, i)
		if err := r.write(sink, rec); err != nil {
			return err
		}
		if err != nil {
			return err
		}
		if i < cfg.Trials {
			if err := r.waitSteady(ctx, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// pause waits d before the next deletion (--trial-jitter).
func (r *runner) pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	r.report(Progress{Phase: "steady", Message: fmt.Sprintf("pausing %s before the deletion (--%s)", d.Round(time.Millisecond), FlagTrialJitter)})
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-r.cfg.Clock.After(d):
		return nil
	}
}

// write hands a finished trial to the sink.
func (r *runner) write(sink Sink, rec *results.Record) error {
	if rec == nil {
		return nil
	}
	if err := sink.Trial(rec); err != nil {
		return fmt.Errorf("write trial %d: %w", rec.Trial, err)
	}
	if w, ok := rec.Window(); ok && rec.Valid {
		r.pmu.Lock()
		r.last.LastWindow = w
		r.pmu.Unlock()
	}
	return nil
}

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
			case <-time.After(pollEvery):
			}
		}
		r.watch.setFollow(nil)
		if err := g.Wait(); err != nil {
			return err
		}
		if err := r.waitSteady(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// steadyPods returns the probe pods that are Running, Ready and not
// terminating.
func (r *runner) steadyPods() ([]*corev1.Pod, error) {
	pods, err := r.watch.pods.Pods(r.ns).List(r.podSelector())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) && p.Status.PodIP != "" {
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

// waitSteady waits until all replicas are Ready, ready in the slices, listed
// by every observed upstream, and each has served load since the wait began.
func (r *runner) waitSteady(ctx context.Context, _ *results.Record) error {
	start := r.cfg.Clock.Now()
	deadline := time.NewTimer(r.cfg.SettleTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		why := r.steadyState(start)
		if why == "" {
			return nil
		}
		r.report(Progress{Phase: "steady", Message: why})
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline.C:
			return fmt.Errorf("no steady state after %s (--%s): %s", r.cfg.SettleTimeout, FlagSettle, why)
		case <-tick.C:
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
	return ""
}
