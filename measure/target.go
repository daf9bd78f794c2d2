package measure

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/deploy"
)

// Flags of measure --target.
const (
	// FlagTarget names the team's workload, deployment/NAME.
	FlagTarget = "target"
	// FlagPort names the app's port the sidecar watches (repeatable).
	FlagPort = "port"
	// FlagEvictionWait bounds how long one pod's eviction may be refused.
	FlagEvictionWait = "eviction-wait"
)

// ModeEvict is measure --target's mode: one pod at a time through the
// Eviction API, so that PodDisruptionBudgets are respected.
const ModeEvict Mode = "evict"

// TargetOptions are measure --target's: a team's own Deployment measured
// in place, its pods evicted one at a time, with `epwindow sidecar` in each
// as the witness in the probe's stead (docs/sidecar.md). The zero value
// (no Deployment) measures epwindow's own probe workload.
type TargetOptions struct {
	// Deployment is NAME of --target deployment/NAME, in Config.Namespace.
	Deployment string
	// Ports are the app's ports the sidecar watches (--port); empty: every
	// TCP containerPort of the pod template's containers.
	Ports []int32
	// EvictionWait bounds how long one pod's eviction may stay refused (a
	// PodDisruptionBudget that allows no disruption) before the run ends
	// with an error naming the budget (0: DefaultEvictionWait).
	EvictionWait time.Duration
	// RolloutTimeout bounds each rollout the run waits for: the sidecar
	// added, and removed at the end (0: DefaultRolloutTimeout).
	RolloutTimeout time.Duration
}

// Defaults of TargetOptions.
const (
	DefaultEvictionWait   = 5 * time.Minute
	DefaultRolloutTimeout = 5 * time.Minute
)

// ParseTarget reads --target: deployment/NAME (deploy/ and deployments/ as
// kubectl spells them too).
func ParseTarget(s string) (string, error) {
	kind, name, ok := strings.Cut(s, "/")
	switch {
	case !ok || name == "":
		return "", fmt.Errorf("--%s %q: want deployment/NAME", FlagTarget, s)
	case kind != "deployment" && kind != "deployments" && kind != "deploy" && !strings.EqualFold(kind, "Deployment"):
		return "", fmt.Errorf("--%s %q: only a Deployment can be measured in place (deployment/NAME)", FlagTarget, s)
	}
	return name, nil
}

// on reports whether the run measures a team's workload.
func (o TargetOptions) on() bool { return o.Deployment != "" }

func (o TargetOptions) evictionWait() time.Duration {
	if o.EvictionWait > 0 {
		return o.EvictionWait
	}
	return DefaultEvictionWait
}

func (o TargetOptions) rolloutTimeout() time.Duration {
	if o.RolloutTimeout > 0 {
		return o.RolloutTimeout
	}
	return DefaultRolloutTimeout
}

// validateTarget checks the flags measure --target cannot combine with:
// those that shape epwindow's own probe workload or need its ports.
func (c *Config) validateTarget() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Namespace == "" {
		add("--%s needs --%s: the Deployment's namespace", FlagTarget, FlagNamespace)
	}
	if c.Mode != ModeDelete && c.Mode != ModeEvict && c.Mode != "" {
		add("--%s evicts one pod at a time: --%s %s does not apply", FlagTarget, FlagMode, c.Mode)
	}
	for _, p := range c.Target.Ports {
		if p < 1 || p > 65535 {
			add("--%s %d: not a port", FlagPort, p)
		}
	}
	if c.Target.EvictionWait < 0 {
		add("--%s (%s) must not be negative", FlagEvictionWait, c.Target.EvictionWait)
	}
	probeOnly := []struct {
		flag string
		set  bool
	}{
		{FlagDNS, c.DNS}, {FlagGRPCDNSRate, c.GRPCDNSRate != 0}, {FlagInClusterLoad, c.InClusterLoad != 0},
		{"streams", c.Streams.N != 0}, {FlagPreStopSleep, c.PreStopSleep != 0}, {FlagExitOnTerm, c.ExitOnSigterm},
		{FlagListenDelay, c.ProbeListenDelay != 0}, {FlagClockOffset, c.ProbeClockOffset != 0},
	}
	for _, f := range probeOnly {
		if f.set {
			add("--%s shapes epwindow's own probe workload: it does not apply to --%s (the Deployment's own pods)", f.flag, FlagTarget)
		}
	}
	return errs
}

// target is what measure --target found in the cluster for the Deployment.
type target struct {
	deployment *appsv1.Deployment
	// services select its pods; service is the one the route sends to (or
	// the first by name).
	services []*corev1.Service
	service  *corev1.Service
	// ingress routes to service (nil when none does); with --route
	// httproute, httpRoute does instead, attached to gateway.
	ingress   *networkingv1.Ingress
	httpRoute *unstructured.Unstructured
	gateway   GatewayRef
	// keptSidecar is set when the Deployment's own manifests keep the
	// sidecar (a staging overlay): the run adds and removes nothing.
	keptSidecar bool
}

// findTarget reads the Deployment of --target, the Services that select its
// pods and the Ingress that routes to one of them, before anything is
// changed: a missing Deployment or Service fails with nothing to undo.
func findTarget(ctx context.Context, c kubernetes.Interface, ns string, o TargetOptions, host string) (*target, error) {
	return findTargetRoute(ctx, c, nil, ns, o, host, RouteIngress, GatewayRef{})
}

// findTargetRoute is findTarget for either route kind: with route
// httproute it reads the HTTPRoutes (dyn) instead of the Ingresses, and the
// Gateway is the matching route's parent (gw, when set, must be it).
func findTargetRoute(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, ns string, o TargetOptions, host, route string, gw GatewayRef) (*target, error) {
	d, err := c.AppsV1().Deployments(ns).Get(ctx, o.Deployment, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, &FlagError{Flag: FlagTarget, Value: "deployment/" + o.Deployment,
			Err: fmt.Errorf("no such Deployment in namespace %s (check --%s)", ns, FlagNamespace)}
	case err != nil:
		return nil, fmt.Errorf("read deployment %s/%s (needs get deployments): %w", ns, o.Deployment, err)
	}
	t := &target{deployment: d}
	if sc, run := deploy.TemplateSidecar(d.Spec.Template); sc != nil {
		if run != "" {
			return nil, fmt.Errorf("deployment %s/%s: run %s has its sidecar in it: that run is still measuring it, or was stopped before removing it (then: kubectl -n %s patch deployment %s --type strategic -p '%s')",
				ns, d.Name, run, ns, d.Name, deploy.SidecarRemovePatch())
		}
		t.keptSidecar = true
	}
	if d.Spec.Replicas != nil && *d.Spec.Replicas < 2 {
		return nil, fmt.Errorf("deployment %s/%s has %d replica(s): evicting one leaves nothing to route to; scale it to 2 or more", ns, d.Name, *d.Spec.Replicas)
	}
	svcs, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list services in %s (needs list services): %w", ns, err)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			t.services = append(t.services, s)
		}
	}
	if len(t.services) == 0 {
		return nil, fmt.Errorf("deployment %s/%s: no Service in %s selects its pods (labels %s): nothing routes to them to measure", ns, d.Name, ns, podLabels)
	}
	slices.SortFunc(t.services, func(a, b *corev1.Service) int { return strings.Compare(a.Name, b.Name) })
	t.service = t.services[0]
	if route == RouteHTTPRoute {
		list, err := dyn.Resource(deploy.HTTPRouteResource).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list httproutes in %s (needs list httproutes.%s): %w", ns, deploy.GatewayGroup, err)
		}
		hr, svc, parent := routingHTTPRoute(list.Items, t.services, gw)
		if hr == nil {
			return nil, fmt.Errorf("deployment %s/%s: no HTTPRoute in %s sends to its Services (%s)%s: measure through --%s %s, or name the route's kind with --%s",
				ns, d.Name, ns, serviceNames(t.services), onGateway(gw), FlagRoute, RouteIngress, FlagRoute)
		}
		t.httpRoute, t.service, t.gateway = hr, svc, parent
		return t, nil
	}
	ings, err := c.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ingresses in %s (needs list ingresses): %w", ns, err)
	}
	if ing, svc := routingIngress(ings.Items, t.services, host); ing != nil {
		t.ingress, t.service = ing, svc
	}
	return t, nil
}

func serviceNames(svcs []*corev1.Service) string {
	names := make([]string, len(svcs))
	for i, s := range svcs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

func onGateway(gw GatewayRef) string {
	if gw.Name == "" {
		return ""
	}
	return " on Gateway " + gw.String()
}

// routingHTTPRoute is the first HTTPRoute (by name) with a backendRef to
// one of svcs (a Service: kind Service or unset, core group), attached to
// gw when gw is set; that Service, and the route's parent Gateway (its
// namespace defaults to the route's: the Gateway API's ParentReference).
func routingHTTPRoute(routes []unstructured.Unstructured, svcs []*corev1.Service, gw GatewayRef) (*unstructured.Unstructured, *corev1.Service, GatewayRef) {
	byName := map[string]*corev1.Service{}
	for _, s := range svcs {
		byName[s.Name] = s
	}
	routes = slices.Clone(routes)
	slices.SortFunc(routes, func(a, b unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	for i := range routes {
		hr := &routes[i]
		parent, ok := routeParent(hr, gw)
		if !ok {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(hr.Object, "spec", "rules")
		for _, rule := range rules {
			refs, _, _ := unstructured.NestedSlice(asMap(rule), "backendRefs")
			for _, ref := range refs {
				m := asMap(ref)
				kind, _, _ := unstructured.NestedString(m, "kind")
				group, _, _ := unstructured.NestedString(m, "group")
				name, _, _ := unstructured.NestedString(m, "name")
				if (kind == "" || kind == "Service") && group == "" {
					if s, ok := byName[name]; ok {
						return hr, s, parent
					}
				}
			}
		}
	}
	return nil, nil, GatewayRef{}
}

// routeParent is the route's Gateway parent: gw if it is among them (or
// the first when gw is unset).
func routeParent(hr *unstructured.Unstructured, gw GatewayRef) (GatewayRef, bool) {
	parents, _, _ := unstructured.NestedSlice(hr.Object, "spec", "parentRefs")
	for _, p := range parents {
		m := asMap(p)
		kind, _, _ := unstructured.NestedString(m, "kind")
		if kind != "" && kind != "Gateway" {
			continue
		}
		ref := GatewayRef{Namespace: hr.GetNamespace()}
		ref.Name, _, _ = unstructured.NestedString(m, "name")
		if ns, _, _ := unstructured.NestedString(m, "namespace"); ns != "" {
			ref.Namespace = ns
		}
		ref.Section, _, _ = unstructured.NestedString(m, "sectionName")
		if gw.Name == "" || gw.Name == ref.Name && gw.Namespace == ref.Namespace {
			return ref, true
		}
	}
	return GatewayRef{}, false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// routingIngress is the first Ingress (by name) with a backend among svcs,
// preferring a rule for host; and that Service.
func routingIngress(ings []networkingv1.Ingress, svcs []*corev1.Service, host string) (*networkingv1.Ingress, *corev1.Service) {
	byName := map[string]*corev1.Service{}
	for _, s := range svcs {
		byName[s.Name] = s
	}
	ings = slices.Clone(ings)
	slices.SortFunc(ings, func(a, b networkingv1.Ingress) int { return strings.Compare(a.Name, b.Name) })
	var fallback *networkingv1.Ingress
	var fallbackSvc *corev1.Service
	for i := range ings {
		ing := &ings[i]
		for _, b := range ingressServiceBackends(ing) {
			s, ok := byName[b.service]
			if !ok {
				continue
			}
			if host == "" || b.host == host {
				return ing, s
			}
			if fallback == nil {
				fallback, fallbackSvc = ing, s
			}
		}
	}
	return fallback, fallbackSvc
}

// ingressBackend is one Service an Ingress sends to, for a host ("" for
// any).
type ingressBackend struct{ host, service string }

func ingressServiceBackends(ing *networkingv1.Ingress) []ingressBackend {
	var out []ingressBackend
	if b := ing.Spec.DefaultBackend; b != nil && b.Service != nil {
		out = append(out, ingressBackend{"", b.Service.Name})
	}
	for _, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		for _, p := range r.HTTP.Paths {
			if p.Backend.Service != nil {
				out = append(out, ingressBackend{r.Host, p.Backend.Service.Name})
			}
		}
	}
	return out
}

// addSidecar patches the Deployment's pod template with the sidecar and
// the run's annotation (a rollout), unless its manifests keep one. The
// patch carries the resourceVersion last read, so that no other run can
// add its sidecar between that read and this write: on a conflict (most
// often only the controller's status update) the Deployment is read again,
// refused if another run's sidecar is in it now, else patched again.
func (r *runner) addSidecar(ctx context.Context, t *target) error {
	if t.keptSidecar {
		r.report(Progress{Phase: "setup", Message: "deployment " + t.deployment.Name + " keeps the sidecar in its manifests: nothing to add"})
		return nil
	}
	r.report(Progress{Phase: "setup", Message: "adding the sidecar to deployment " + t.deployment.Name + " (a rollout)"})
	d := t.deployment
	for attempt := 1; ; attempt++ {
		patch, err := r.sidecarPatch(d)
		if err != nil {
			return err
		}
		_, err = r.cfg.Client.AppsV1().Deployments(r.ns).Patch(ctx, d.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "epwindow"})
		switch {
		case err == nil:
			r.patched = true
			return r.waitRollout(ctx, d.Name, "with the sidecar")
		case apierrors.IsConflict(err) && attempt < maxPatchAttempts:
			if d, err = r.cfg.Client.AppsV1().Deployments(r.ns).Get(ctx, d.Name, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("read deployment %s/%s again (needs get deployments): %w", r.ns, t.deployment.Name, err)
			}
			if sc, run := deploy.TemplateSidecar(d.Spec.Template); sc != nil {
				return fmt.Errorf("deployment %s/%s: run %s added its sidecar while this run read it: it is measuring it now", r.ns, d.Name, cmp.Or(run, "(unnamed)"))
			}
		case apierrors.IsConflict(err):
			return fmt.Errorf("deployment %s/%s kept changing while this run tried to add the sidecar (%d attempts): try again once it is still", r.ns, d.Name, attempt)
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			return fmt.Errorf("adding the sidecar to deployment %s/%s was refused (needs patch deployments; an admission policy or Pod Security level may refuse the sidecar, which runs as user 65532 with no capabilities): %w", r.ns, d.Name, err)
		default:
			return fmt.Errorf("patch deployment %s/%s with the sidecar: %w", r.ns, d.Name, err)
		}
	}
}

// maxPatchAttempts bounds addSidecar's retries after a conflict.
const maxPatchAttempts = 5

// sidecarPatch is the strategic-merge patch that adds the run's sidecar to
// d, with d's resourceVersion as its precondition.
func (r *runner) sidecarPatch(d *appsv1.Deployment) ([]byte, error) {
	patch, err := deploy.SidecarPatch(d, deploy.SidecarOptions{Image: r.cfg.Image, Ports: r.cfg.Target.Ports, RunID: r.runID,
		Interval: sidecarInterval})
	if err != nil {
		return nil, &FlagError{Flag: FlagPort, Err: err}
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	m["metadata"] = map[string]any{"resourceVersion": d.ResourceVersion}
	return json.Marshal(m)
}

// sidecarInterval is the sidecar's poll interval in a measured pod: its
// default, stated so that the record's precision is the run's choice.
const sidecarInterval = 10 * time.Millisecond

// removeSidecar undoes addSidecar: the strategic-merge patch that deletes
// the container and the annotation, which gives the template back as it
// was, so the Deployment controller scales its old ReplicaSet back up; it
// waits for that rollout. It runs on a context of its own: after Ctrl-C
// too.
func (r *runner) removeSidecar(name string) error {
	if !r.patched {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Target.rolloutTimeout()+30*time.Second)
	defer cancel()
	r.report(Progress{Phase: "cleanup", Message: "removing the sidecar from deployment " + name + " (a rollout back to its template)"})
	_, err := r.cfg.Client.AppsV1().Deployments(r.ns).Patch(ctx, name, types.StrategicMergePatchType, deploy.SidecarRemovePatch(), metav1.PatchOptions{FieldManager: "epwindow"})
	if err != nil {
		return fmt.Errorf("remove the sidecar from deployment %s/%s: %w (undo it by hand: kubectl -n %s patch deployment %s --type strategic -p '%s')",
			r.ns, name, err, r.ns, name, deploy.SidecarRemovePatch())
	}
	r.patched = false
	return r.waitRollout(ctx, name, "back to its template")
}

// waitRollout waits until the Deployment's controller has rolled out its
// current template: observed, every replica updated and available, no old
// replica left (kubectl rollout status's test).
func (r *runner) waitRollout(ctx context.Context, name, what string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Target.rolloutTimeout())
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		d, err := r.cfg.Client.AppsV1().Deployments(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("deployment %s/%s: rollout %s not done within %s: %s", r.ns, name, what, r.cfg.Target.rolloutTimeout(), last)
			}
			return fmt.Errorf("read deployment %s/%s: %w", r.ns, name, err)
		}
		done, why := rolledOut(d)
		if done {
			return nil
		}
		if why != last {
			r.report(Progress{Phase: "setup", Message: "rollout " + what + ": " + why})
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployment %s/%s: rollout %s not done within %s: %s", r.ns, name, what, r.cfg.Target.rolloutTimeout(), last)
		case <-tick.C:
		}
	}
}

// rolledOut is kubectl rollout status's condition
// (k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go): the controller
// observed the generation, and every replica is updated and available.
func rolledOut(d *appsv1.Deployment) (bool, string) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	switch {
	case s.ObservedGeneration < d.Generation:
		return false, "waiting for the controller to see the change"
	case s.UpdatedReplicas < want:
		return false, fmt.Sprintf("%d of %d replicas updated", s.UpdatedReplicas, want)
	case s.Replicas > s.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas pending termination", s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < s.UpdatedReplicas:
		return false, fmt.Sprintf("%d of %d updated replicas available", s.AvailableReplicas, s.UpdatedReplicas)
	}
	return true, ""
}

// errEvictionRefused marks an eviction a PodDisruptionBudget kept refusing
// for the whole EvictionWait.
var errEvictionRefused = errors.New("eviction refused")
