package measure

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/deploy"
)

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

// createTimeout bounds one create request. Creates run on a context that
// Ctrl-C does not cancel, so that the run always learns whether an object
// exists (and its UID) before it cleans up; the run checks ctx between
// them.
const createTimeout = 30 * time.Second

// created is what the run made in an existing namespace, for cleanup (in
// its own namespace the namespace goes with everything in it): UIDs once
// the API server confirmed the create; names are r.wl's.
type created struct {
	// ingress or httproute, by the run's route.
	service, deployment, ingress, httproute types.UID
	// headless is the headless Service of --dns.
	headless types.UID
	// runners is the in-cluster runners' Deployment.
	runners types.UID
}

// create makes the namespace (unless the run uses an existing one), the
// Service, the Deployment and the Ingress or HTTPRoute. Everything carries
// the run id; nothing is created outside r.ns (the HTTPRoute only refers to
// its Gateway elsewhere).
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
	var svc *corev1.Service
	if r.made.service, err = call("service "+r.ns+"/"+name, func(ctx context.Context) (types.UID, error) {
		s, err := c.CoreV1().Services(r.ns).Create(ctx, r.wl.Service, metav1.CreateOptions{})
		svc = s
		return uidOf(s, err)
	}); err != nil {
		return err
	}
	if h := r.wl.Headless; h != nil {
		if r.made.headless, err = call("service "+r.ns+"/"+h.Name+" (headless, for --"+FlagDNS+")", func(ctx context.Context) (types.UID, error) {
			return uidOf(c.CoreV1().Services(r.ns).Create(ctx, h, metav1.CreateOptions{}))
		}); err != nil {
			return err
		}
	}
	if r.made.deployment, err = call("deployment "+r.ns+"/"+name, func(ctx context.Context) (types.UID, error) {
		return uidOf(c.AppsV1().Deployments(r.ns).Create(ctx, r.wl.Deployment, metav1.CreateOptions{}))
	}); err != nil {
		return err
	}
	if r.wl.HTTPRoute != nil {
		r.made.httproute, err = call("httproute "+r.ns+"/"+name, func(ctx context.Context) (types.UID, error) {
			return uidOf(r.dynamic.Resource(deploy.HTTPRouteResource).Namespace(r.ns).Create(ctx, r.wl.HTTPRoute, metav1.CreateOptions{}))
		})
	} else {
		r.made.ingress, err = call("ingress "+r.ns+"/"+name, func(ctx context.Context) (types.UID, error) {
			return uidOf(c.NetworkingV1().Ingresses(r.ns).Create(ctx, r.wl.Ingress, metav1.CreateOptions{}))
		})
	}
	if err != nil || r.cfg.InClusterLoad == 0 {
		return err
	}
	// The runners target the ClusterIP the Service got when it was created.
	dep, err := r.renderRunners(svc)
	if err != nil {
		return err
	}
	r.runnerDep = dep
	r.made.runners, err = call("deployment "+r.ns+"/"+dep.Name+" (the in-cluster load runners)", func(ctx context.Context) (types.UID, error) {
		return uidOf(c.AppsV1().Deployments(r.ns).Create(ctx, dep, metav1.CreateOptions{}))
	})
	return err
}

func uidOf[T interface{ GetUID() types.UID }](o T, err error) (types.UID, error) {
	if err != nil {
		return "", err
	}
	return o.GetUID(), nil
}

// routeKind names the run's route object as kubectl does: "ingress" or
// "httproute".
func (r *runner) routeKind() string {
	if r.wl.HTTPRoute != nil {
		return "httproute"
	}
	return "ingress"
}

// ownNamespace reports whether the run created r.ns (and deletes it).
func (r *runner) ownNamespace() bool { return r.cfg.Namespace == "" }

// cleanupPoll is how often cleanup checks whether what it deleted is gone.
const cleanupPoll = 250 * time.Millisecond

// cleanupTimeout bounds the whole cleanup.
const cleanupTimeout = 2 * time.Minute

// cleanup deletes what the run created and waits until its pods are gone, on
// a context of its own so that it also runs after Ctrl-C. Probe pods are
// released and deleted with a short grace first, so nothing waits out the
// long measuring grace period. In its own namespace it deletes the namespace;
// in an existing one (--namespace) exactly its Deployment, Service and
// Ingress or HTTPRoute, each by name and, when known, UID.
func (r *runner) cleanup() error {
	what := "namespace " + r.ns
	if !r.ownNamespace() {
		what = fmt.Sprintf("deployment, service and %s %s in namespace %s", r.routeKind(), r.wl.Deployment.Name, r.ns)
		if r.runnerDep != nil {
			what += " and the runners' deployment " + r.runnerDep.Name
		}
		if r.wl.Headless != nil {
			what += " and the headless service " + r.wl.Headless.Name
		}
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
	// The runners stop sending before the probes go.
	_, _ = r.deleteRunners(ctx)
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
		case <-r.cfg.Clock.After(cleanupPoll):
		}
	}
}

// deleteObjects removes the run's Deployment, Service and Ingress or
// HTTPRoute from an existing namespace and waits for its pods to go. The names carry the run
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
	goneNamed := func(kind, name string, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("clean up: delete %s %s/%s (delete it by hand: kubectl -n %s delete %s %s): %w", kind, r.ns, name, r.ns, kind, name, err))
		}
	}
	gone := func(kind string, err error) { goneNamed(kind, name, err) }
	// The Deployment first, so that its ReplicaSet (removed by the garbage
	// collector) stops replacing the pods released below.
	gone("deployment", c.AppsV1().Deployments(r.ns).Delete(ctx, name, opts(r.made.deployment)))
	if _, err := r.deleteRunners(ctx); err != nil {
		errs = append(errs, err)
	}
	if r.wl.HTTPRoute != nil {
		gone("httproute", r.dynamic.Resource(deploy.HTTPRouteResource).Namespace(r.ns).Delete(ctx, name, opts(r.made.httproute)))
	} else {
		gone("ingress", c.NetworkingV1().Ingresses(r.ns).Delete(ctx, name, opts(r.made.ingress)))
	}
	gone("service", c.CoreV1().Services(r.ns).Delete(ctx, name, opts(r.made.service)))
	if h := r.wl.Headless; h != nil {
		goneNamed("service", h.Name, c.CoreV1().Services(r.ns).Delete(ctx, h.Name, opts(r.made.headless)))
	}
	// Pods the ReplicaSet creates before the garbage collector removes it
	// are released on a later pass.
	seen := map[types.UID]bool{}
	for {
		runners, _ := r.deleteRunners(ctx)
		if r.releasePods(ctx, seen) == 0 && runners == 0 {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("clean up: probe or runner pods still terminating in %s after %s; they go by themselves (check: kubectl -n %s get pods -l %s)",
				r.ns, cleanupTimeout, r.ns, deploy.LabelRunID+"="+r.runID))...)
		case <-r.cfg.Clock.After(cleanupPoll):
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
