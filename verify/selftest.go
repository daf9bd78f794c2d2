package verify

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
)

// Self-test timing.
const (
	// canaryMargin is the canary's grace period beyond its hold: it exits
	// when the hold ends, so the grace period never runs out.
	canaryMargin = 2 * time.Second
	// canarySettle bounds the wait for the canary to be Ready and routed.
	canarySettle = 2 * time.Minute
	// cleanupTimeout bounds the deletion of the self-test's namespace.
	cleanupTimeout = 2 * time.Minute
)

// selfTestNamespace is the namespace the self-test creates.
func (r *runner) selfTestNamespace() string { return "epwindow-verify-" + r.id }

// selfTest runs one rollout of a broken canary — the probe refusing new
// connections from SIGTERM on, no preStop — with the team's replica count,
// behind the same ingress class, under the same load shape, in a namespace
// it creates and deletes (also on Ctrl-C). The rollout must fail requests.
//
// The canary keeps its process, and so its address, for the lag after
// SIGTERM (the window the ingress may still route to it: timing(window)): every request routed to
// it then is refused, the failure an ingress's retries can hide. An app
// that exits at once is no better a test: on a kubelet its exit stops the
// pod sandbox and removes the address at once
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go, killPodWithSyncResult:
// the containers, then StopPodSandbox), and requests to a vanished address
// time out rather than being refused, which no ingress retry hides.
func (r *runner) selfTest(ctx context.Context, team *appsv1.Deployment, window time.Duration) (_ *SelfTest, err error) {
	cfg := r.cfg
	lag, tail := timing(window)
	ns := r.selfTestNamespace()
	replicas := max(int32(2), team.Status.ReadyReplicas)
	st := &SelfTest{Namespace: ns, Replicas: int(replicas)}
	class, err := r.ingressClass(ctx, team)
	if err != nil {
		return st, err
	}
	host := "canary-" + r.id + ".epwindow.invalid"
	wl, err := deploy.Render(deploy.Params{Namespace: ns, Name: "canary", Replicas: replicas, Image: cfg.SelfTestImage,
		IngressClass: class, Host: host, Hold: lag, GracePeriod: lag + canaryMargin, RefuseOnSigterm: true, RunID: r.id})
	if err != nil {
		return st, fmt.Errorf("render the canary: %w", err)
	}
	r.say("self-test: broken canary (refuses connections from SIGTERM on, for %s; no preStop), %d replicas, ingress class %q, in namespace %s", lag, replicas, class, ns)
	defer func() {
		if cerr := r.deleteNamespace(ns); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := r.createCanary(ctx, wl); err != nil {
		return st, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr := newTracker(cfg.Client, r.clk, ns, labels.SelectorFromSet(wl.Deployment.Spec.Selector.MatchLabels))
	if err := tr.start(ctx); err != nil {
		return st, err
	}
	gen, err := load.New(load.Config{URL: cfg.URL.String(), Host: host, Rate: cfg.Rate, Timeout: cfg.LoadTimeout,
		Method: cfg.Method, Body: cfg.Body, TLS: cfg.TLS}, r.clk)
	if err != nil {
		return st, &UsageError{Err: err}
	}
	loadDone := make(chan struct{})
	go func() { _ = gen.Run(ctx); close(loadDone) }()
	defer func() { cancel(); <-loadDone }()

	if err := r.waitRouted(ctx, tr, gen, int(replicas)); err != nil {
		return st, err
	}
	tg := &target{ns: ns, name: wl.Deployment.Name, track: tr, gen: gen, lag: lag, tail: tail, res: cfg.pollInterval()}
	ro, err := r.rollout(ctx, tg, 0, func() {})
	if err != nil {
		return st, err
	}
	if !ro.Complete {
		return st, fmt.Errorf("the canary's rollout did not complete: %s", ro.Condition)
	}
	st.Outcomes = ro.Outcomes
	st.Terminations = len(ro.Exits)
	for _, f := range ro.Failures {
		if f.Side == SideShutdown && f.SinceNS > st.WindowNS {
			st.WindowNS = f.SinceNS
		}
	}
	st.Blind = st.Outcomes.Failures() == 0
	r.say("self-test: %s over %d terminations", st.Outcomes, st.Terminations)
	return st, nil
}

// createCanary creates the canary's namespace, Service, Deployment and
// Ingress. Each create runs to its answer (so cleanup knows what exists);
// Ctrl-C is checked between them.
func (r *runner) createCanary(ctx context.Context, wl *deploy.Workload) error {
	c := r.cfg.Client
	ns := wl.Namespace.Name
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"namespace " + ns, func(ctx context.Context) error {
			_, err := c.CoreV1().Namespaces().Create(ctx, wl.Namespace, metav1.CreateOptions{})
			return err
		}},
		{"service", func(ctx context.Context) error {
			_, err := c.CoreV1().Services(ns).Create(ctx, wl.Service, metav1.CreateOptions{})
			return err
		}},
		{"deployment", func(ctx context.Context) error {
			_, err := c.AppsV1().Deployments(ns).Create(ctx, wl.Deployment, metav1.CreateOptions{})
			return err
		}},
		{"ingress", func(ctx context.Context) error {
			_, err := c.NetworkingV1().Ingresses(ns).Create(ctx, wl.Ingress, metav1.CreateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := s.do(cctx)
		cancel()
		if err != nil {
			return fmt.Errorf("create the canary's %s: %w", s.what, err)
		}
	}
	return nil
}

// waitRouted waits until n canary pods are Ready and each has answered the
// load through the ingress.
func (r *runner) waitRouted(ctx context.Context, tr *tracker, gen *load.Generator, n int) error {
	deadline := r.clk.Now().Add(canarySettle)
	since := r.clk.Now()
	for {
		ready := tr.readyPods()
		routed := 0
		for _, p := range ready {
			if ps, ok := gen.Pod(p.name); ok && ps.Last.After(since) {
				routed++
			}
		}
		if len(ready) >= n && routed >= n {
			return nil
		}
		if err := r.sleep(ctx, deadline); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("the canary is not routed after %s: %d of %d pods Ready, %d answering through --%s %s; is --%s the ingress of that class?",
				canarySettle, len(ready), n, routed, FlagURL, r.cfg.URL, FlagURL)
		}
	}
}

// deleteNamespace deletes the self-test's namespace, after checking it is
// the one this run created, and waits until it is gone; on its own context,
// so it also runs after Ctrl-C.
func (r *runner) deleteNamespace(ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	c := r.cfg.Client.CoreV1().Namespaces()
	got, err := c.Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean up: get namespace %s: %w", ns, err)
	}
	if got.Labels[deploy.LabelRunID] != r.id {
		return fmt.Errorf("clean up: namespace %s is not this run's; left alone", ns)
	}
	r.say("self-test: deleting namespace %s", ns)
	uid := got.UID
	if err := c.Delete(ctx, ns, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("clean up: delete namespace %s (delete it by hand: kubectl delete namespace %s): %w", ns, ns, err)
	}
	for {
		if _, err := c.Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clean up: namespace %s still terminating after %s; it goes by itself", ns, cleanupTimeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ingressClass is the class the canary uses: --ingress-class, else that of
// an Ingress routing to a Service that selects the Deployment's pods, else
// the cluster's default IngressClass.
func (r *runner) ingressClass(ctx context.Context, d *appsv1.Deployment) (string, error) {
	if r.cfg.IngressClass != "" {
		return r.cfg.IngressClass, nil
	}
	c := r.cfg.Client
	svcs, err := c.CoreV1().Services(d.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list services in %s to find the Deployment's Ingress (or pass --%s): %w", d.Namespace, FlagIngressClass, err)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	selecting := map[string]bool{}
	for _, s := range svcs.Items {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			selecting[s.Name] = true
		}
	}
	ings, err := c.NetworkingV1().Ingresses(d.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list ingresses in %s (or pass --%s): %w", d.Namespace, FlagIngressClass, err)
	}
	for _, ing := range ings.Items {
		for _, svc := range ingressServices(ing.Spec) {
			if selecting[svc] && ing.Spec.IngressClassName != nil {
				return *ing.Spec.IngressClassName, nil
			}
		}
	}
	classes, err := c.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list ingressclasses (or pass --%s): %w", FlagIngressClass, err)
	}
	for _, ic := range classes.Items {
		if ic.Annotations["ingressclass.kubernetes.io/is-default-class"] == "true" {
			return ic.Name, nil
		}
	}
	return "", usage("no Ingress with a class routes to %s/%s and the cluster has no default IngressClass: pass --%s (or --%s=false)",
		d.Namespace, d.Name, FlagIngressClass, FlagSelfTest)
}
