package measure

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
	"github.com/epwindow/epwindow/sidecar"
)

// runTarget is Run for measure --target: the team's Deployment gets the
// sidecar (a rollout), its pods are evicted one at a time under the load
// (or the app's own traffic), and at the end — and on Ctrl-C or a failure —
// the sidecar is removed and the Deployment rolled back to its template.
func runTarget(ctx context.Context, r *runner, sink Sink, serverVersion string) (err error) {
	cfg := r.cfg
	r.ns = cfg.Namespace
	if cfg.Route == RouteHTTPRoute {
		if r.dynamic = cfg.Dynamic; r.dynamic == nil {
			if cfg.RESTConfig == nil {
				return errors.New("no cluster configuration for the Gateway API's dynamic client: check --kubeconfig / --context")
			}
			if r.dynamic, err = dynamic.NewForConfig(cfg.RESTConfig); err != nil {
				return fmt.Errorf("build the dynamic client for --%s %s: %w", FlagRoute, RouteHTTPRoute, err)
			}
		}
	}
	t, err := findTargetRoute(ctx, cfg.Client, r.dynamic, r.ns, cfg.Target, cfg.Host, cfg.Route, cfg.Gateway)
	if err != nil {
		return err
	}
	if t.ingress == nil && t.httpRoute == nil && cfg.Observer == upstream.KindAuto {
		// Nothing to pick the controller by, and nothing says the load
		// reaches these pods.
		return &FlagError{Flag: FlagObserver, Value: upstream.KindAuto, Err: fmt.Errorf(
			"deployment %s/%s: no Ingress in %s sends to its Services (%s): with an HTTPRoute, add --%s %s; for a route the tool cannot read (a cloud load balancer), name --%s (none, or the controller with --observer-url) and --%s",
			r.ns, t.deployment.Name, r.ns, serviceNames(t.services), FlagRoute, RouteHTTPRoute, FlagObserver, FlagURL)}
	}
	r.target = t
	if r.cfg.Host == "" && t.httpRoute != nil {
		// The route's first hostname, so that the Gateway's listener
		// matches the load (a route without hostnames takes any).
		if hosts, _, _ := unstructured.NestedStringSlice(t.httpRoute.Object, "spec", "hostnames"); len(hosts) > 0 && !strings.Contains(hosts[0], "*") {
			r.cfg.Host = hosts[0]
		}
		cfg = r.cfg
	}
	if r.cfg.Host == "" && t.ingress != nil {
		// The host of the rule that routes to the Service, so that the load
		// matches it (an Ingress without a host rule takes any).
		for _, b := range ingressServiceBackends(t.ingress) {
			if b.service == t.service.Name && b.host != "" {
				r.cfg.Host = b.host
				break
			}
		}
		cfg = r.cfg
	}
	r.wl = &deploy.Workload{Deployment: t.deployment, Service: t.service, Ingress: t.ingress}
	r.sidecars = probeClient{client: cfg.Client, ns: r.ns, port: deploy.DefaultSidecarPort}
	r.probes = r.sidecars

	// The observer is built before anything is changed, as Run's is.
	tgt := upstream.Target{Namespace: r.ns, Service: t.service.Name, Port: t.service.Spec.Ports[0].Port, Host: cfg.Host}
	obsOpts := cfg.ObserverOptions
	route := "no Ingress routes to it"
	switch {
	case t.ingress != nil:
		tgt.Ingress, route = t.ingress.Name, "Ingress "+t.ingress.Name
	case t.httpRoute != nil:
		if r.gateway, err = CheckGateway(ctx, cfg.Client.Discovery(), r.dynamic, t.gateway); err != nil {
			return err
		}
		// Auto picks the observer by the Gateway's controller.
		obsOpts.GatewayClass, obsOpts.GatewayController = r.gateway.Class, r.gateway.Controller
		tgt.Route, route = t.httpRoute.GetName(), "HTTPRoute "+t.httpRoute.GetName()+" on "+r.gateway.String()
	}
	closeObserver, err := r.openObserver(ctx, tgt, obsOpts)
	if err != nil {
		return err
	}
	defer closeObserver()
	r.report(Progress{Phase: "setup", Message: fmt.Sprintf("deployment %s: Service %s, %s; observer %s", t.deployment.Name, t.service.Name, route, r.choice)})

	defer func() {
		if cerr := r.removeSidecar(t.deployment.Name); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := r.addSidecar(ctx, t); err != nil {
		return err
	}
	return r.inBackground(ctx, closeObserver, func(ctx context.Context, g *errgroup.Group) error {
		return r.measureTarget(ctx, g, sink, serverVersion)
	})
}

// measureTarget is measure for a team's Deployment: the watches, the
// observer and the load (none with --rate 0), steady state, the header,
// then the evictions.
func (r *runner) measureTarget(ctx context.Context, g *errgroup.Group, sink Sink, serverVersion string) error {
	cfg := r.cfg
	r.heartbeat = newHeartbeat(cfg.Client, cfg.Clock)
	g.Go(func() error { return r.heartbeat.run(ctx) })
	r.watch = newWatcher(cfg.Client, cfg.Clock, r.ns, r.podSelector(), r.wl.Service.Name)
	if err := r.watch.start(ctx); err != nil {
		return err
	}
	r.tracker = upstream.NewTracker(r.obs, cfg.Clock, 0)
	r.tracker.SetNotify(func(msg string) { r.report(Progress{Phase: "observer", Message: msg}) })
	g.Go(func() error { return r.tracker.Run(ctx) })
	lcfg := load.Config{Host: cfg.Host, Rate: cfg.Rate, KeepAlive: cfg.KeepAlive, Timeout: cfg.LoadTimeout, MaxConns: cfg.LoadMaxConns, Method: cfg.LoadMethod}
	if cfg.URL != nil {
		lcfg.URL = cfg.URL.String()
	}
	if cfg.Rate > 0 {
		gen, err := load.New(lcfg, cfg.Clock)
		if err != nil {
			return err
		}
		r.gen = gen
		g.Go(func() error { return gen.Run(ctx) })
	}
	if err := r.waitTargetSteady(ctx); err != nil {
		return err
	}
	t := r.target
	h := &results.Header{
		Kind: results.KindHeader, Schema: results.SchemaVersion, ToolVersion: cfg.ToolVersion,
		StartedAt: cfg.Clock.Now(), ServerVersion: serverVersion, Cluster: cfg.ClusterName,
		Ingress: results.Ingress{Class: cfg.IngressClass, Settings: r.obs.Settings(ctx)},
		Mode:    string(ModeEvict), Namespace: r.ns, Replicas: int(r.replicas()), Rate: cfg.Rate, Keepalive: cfg.KeepAlive,
		Flags: cfg.Flags, Route: results.Route{Kind: results.RouteKindIngress},
		Target: &results.Target{Kind: "Deployment", Namespace: r.ns, Name: t.deployment.Name, Witness: "sidecar", Ports: cfg.Target.Ports},
	}
	for _, s := range t.services {
		h.Target.Services = append(h.Target.Services, s.Name)
	}
	switch {
	case t.ingress != nil:
		h.Target.Route = "Ingress/" + t.ingress.Name
		if c := t.ingress.Spec.IngressClassName; c != nil && h.Ingress.Class == "" {
			h.Ingress.Class = *c
		}
	case t.httpRoute != nil:
		h.Target.Route = "HTTPRoute/" + t.httpRoute.GetName()
		h.Route = results.Route{Kind: results.RouteKindHTTPRoute, Gateway: r.gateway.Ref.String(),
			GatewayClass: r.gateway.Class, Controller: r.gateway.Controller}
	}
	version := ""
	if v, ok := r.obs.(upstream.Versioner); ok {
		version = v.Version(ctx)
	}
	h.Ingress.Controller, h.Ingress.Version, h.Ingress.VersionNote = controllerOf(r.choice, version)
	if r.obs.Name() != upstream.KindNone {
		h.Observers = []results.Observer{headerObserver(r.obs, r.tracker.Stats(), r.obs.Settings(ctx))}
	}
	if err := sink.Header(h); err != nil {
		return fmt.Errorf("write results header: %w", err)
	}
	return r.deletions(ctx, sink)
}

// replicas is the Deployment's spec.replicas (1 when unset, the API's
// default).
func (r *runner) replicas() int32 {
	if n := r.wl.Deployment.Spec.Replicas; n != nil {
		return *n
	}
	return 1
}

// waitTargetSteady waits until every replica is Ready with its sidecar
// started, ready in the slices, listed by the observer, and the load (when
// there is one) has been answered since the wait began: the app's replies
// carry no pod name, so the load cannot say which pod answered.
func (r *runner) waitTargetSteady(ctx context.Context) error {
	return r.pollSteady(ctx, func() (string, error) {
		pods, err := r.steadyPods()
		if err != nil {
			return "", err
		}
		if len(pods) != int(r.replicas()) {
			return fmt.Sprintf("%d of %d pods of deployment %s ready with the sidecar", len(pods), r.replicas(), r.wl.Deployment.Name), nil
		}
		sl, err := r.watch.slices.EndpointSlices(r.ns).List(r.watch.sliceSel)
		if err != nil {
			return "", err
		}
		var addrs []netip.AddrPort
		for _, p := range pods {
			a, err := netip.ParseAddr(p.Status.PodIP)
			if err != nil {
				return fmt.Sprintf("pod %s has address %q", p.Name, p.Status.PodIP), nil
			}
			st, ok := addressState(sl, a)
			if !ok || !st.Ready {
				return fmt.Sprintf("pod %s (%s) not yet ready in the EndpointSlices of Service %s", p.Name, a, r.wl.Service.Name), nil
			}
			addrs = append(addrs, netip.AddrPortFrom(a, slicePort(sl)))
		}
		if ok, why := r.tracker.Steady(addrs); !ok {
			return why, nil
		}
		if r.gen != nil && r.gen.Totals().OK == 0 {
			return "no load answered yet through " + r.cfg.URL.String(), nil
		}
		return "", nil
	}, func(why string) error {
		return fmt.Errorf("no steady state after %s (--%s): %s", r.cfg.SettleTimeout, FlagSettle, why)
	})
}

// slicePort is the first port the Service's EndpointSlices list: the
// port an upstream lists the addresses with.
func slicePort(sl []*discoveryv1.EndpointSlice) uint16 {
	for _, s := range sl {
		for _, p := range s.Ports {
			if p.Port != nil {
				return uint16(*p.Port)
			}
		}
	}
	return 0
}

// sidecarStarted reports whether the pod's sidecar has started (its
// startupProbe passed: the baseline dump is read), or the pod has no
// sidecar (nothing to wait for: steadyPods keeps such pods out).
func sidecarStarted(p *corev1.Pod) bool {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == deploy.SidecarContainerName {
			return cs.Started != nil && *cs.Started && cs.State.Running != nil
		}
	}
	return false
}

// targetTrial evicts one pod of the Deployment and records its removal
// with the sidecar's record in the probe's stead.
func (r *runner) targetTrial(ctx context.Context, i int) (*results.Record, error) {
	pods, err := r.steadyPods()
	if err != nil {
		return nil, err
	}
	pod := pickPod(pods)
	if pod == nil {
		return nil, fmt.Errorf("trial %d: no ready pod of deployment %s with the sidecar to evict", i, r.wl.Deployment.Name)
	}
	addr, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return nil, fmt.Errorf("trial %d: pod %s address %q: %w", i, pod.Name, pod.Status.PodIP, err)
	}
	in := r.newInput(ctx, i, pod, addr, nil)
	in.sidecarMode, in.hostIP = true, pod.Status.HostIP
	r.report(Progress{Phase: "trial", Trial: i, Stage: "evict", Message: "evicting " + pod.Name})
	r.watch.begin(pod, addr)
	uid := pod.UID
	if in.t0, in.acked, err = r.evict(ctx, i, pod); err != nil {
		r.watch.end(uid)
		return nil, err
	}
	return r.followSidecar(ctx, in, uid)
}

// evict sends the pod's eviction (policy/v1 Eviction, the pod's own grace
// period). A PodDisruptionBudget that allows no disruption now answers 429:
// the eviction is retried, never forced, for up to EvictionWait, after
// which the run ends naming the budget. T0 is stamped just before the
// eviction that was accepted.
func (r *runner) evict(ctx context.Context, i int, pod *corev1.Pod) (t0, acked time.Time, err error) {
	cfg := r.cfg
	uid := pod.UID
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: r.ns},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}}
	began := cfg.Clock.Now()
	for {
		t0 = cfg.Clock.Now()
		err = r.deleter.PolicyV1().Evictions(r.ns).Evict(ctx, ev)
		acked = cfg.Clock.Now()
		if err == nil {
			return t0, acked, nil
		}
		if !apierrors.IsTooManyRequests(err) {
			return t0, acked, fmt.Errorf("trial %d: evict pod %s/%s (needs create pods/eviction): %w", i, r.ns, pod.Name, err)
		}
		if cfg.Clock.Since(began) >= cfg.Target.evictionWait() {
			return t0, acked, fmt.Errorf("trial %d: evict pod %s/%s: %w for %s (--%s) by the API server: %v; a PodDisruptionBudget over the Deployment's pods allows no disruption (kubectl -n %s get pdb)",
				i, r.ns, pod.Name, errEvictionRefused, cfg.Target.evictionWait(), FlagEvictionWait, err, r.ns)
		}
		r.report(Progress{Phase: "trial", Trial: i, Stage: "evict", Message: "eviction of " + pod.Name + " refused (" + firstLine(err.Error()) + "): waiting"})
		wait := cfg.Clock.NewTimer(evictRetry(err))
		select {
		case <-ctx.Done():
			wait.Stop()
			return t0, acked, context.Cause(ctx)
		case <-wait.C():
		}
	}
}

// evictRetry is how long to wait before asking again: the API server's
// Retry-After for a refused eviction (10 s when the budget has no room:
// pkg/registry/core/pod/storage/eviction.go), 5 s without one.
func evictRetry(err error) time.Duration {
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 5 * time.Second
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// followSidecar records an evicted pod's removal from in.t0 on: nothing is
// held (the app ends as it would in a rollout); the sidecar's record is
// read through the pod proxy while the pod lives and, once the pod is gone,
// taken from its termination message when the status carries one.
func (r *runner) followSidecar(ctx context.Context, in trialInput, uid types.UID) (*results.Record, error) {
	cfg := r.cfg
	var tl *sidecar.Timeline
	var tlErr error
	grace := r.targetGrace()
	// The port the observer lists the address with, read once: the slices
	// still hold the address as the trial begins.
	addrPort := netip.AddrPortFrom(in.addr, r.trackedPort())
	deadline := cfg.Clock.NewTimer(grace + 30*time.Second)
	defer deadline.Stop()
	tick := cfg.Clock.NewTicker(timelineEvery)
	defer tick.Stop()
wait:
	for {
		s := r.watch.snapshot(uid)
		if s.podDeleted.IsZero() {
			if t, err := r.sidecars.sidecarTimeline(ctx, in.pod); err == nil {
				tl = t
			} else {
				tlErr = err
			}
		}
		stage, _, removed := r.releaseState(in, uid, addrPort)
		r.report(Progress{Phase: "trial", Trial: in.trial, Stage: stage})
		if !s.podDeleted.IsZero() && !s.sliceRemoved.IsZero() && removed {
			break
		}
		select {
		case <-ctx.Done():
			r.watch.end(uid)
			return nil, context.Cause(ctx)
		case <-deadline.C():
			in.reasons = append(in.reasons, removalTimeout(grace))
			break wait
		case <-r.watch.changed:
		case <-tick.C():
		}
	}
	end := cfg.Clock.Now()
	in.watch = r.watch.end(uid)
	in.removals = r.tracker.Removals(addrPort)
	r.tracker.Forget(addrPort)
	in.sidecar, in.timelineSource = tl, "pod proxy"
	if term, ok := sidecarTermination(in.watch.lastPod); ok {
		in.sidecar, in.timelineSource = term, "termination message"
	}
	if in.sidecar == nil && tlErr != nil {
		in.timelineSource = tlErr.Error()
	}
	in.exitByKubelet = appExit(in.watch.lastPod)
	if r.gen != nil {
		if err := r.gen.Settle(ctx, end); err != nil {
			return nil, err
		}
		in.failures = r.gen.Failures(in.t0, end)
	}
	r.trialFaults(&in, end)
	return buildRecord(in), nil
}

// trackedPort is the port the observer lists the Deployment's addresses
// with: the EndpointSlices' (the Service's target port).
func (r *runner) trackedPort() uint16 {
	if r.target == nil {
		return uint16(deploy.DefaultPort)
	}
	sl, err := r.watch.slices.EndpointSlices(r.ns).List(r.watch.sliceSel)
	if err != nil {
		return 0
	}
	return slicePort(sl)
}

// targetGrace is the Deployment's terminationGracePeriodSeconds (the API's
// 30 s when unset).
func (r *runner) targetGrace() time.Duration {
	if g := r.wl.Deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// sidecarTermination is the sidecar's record from its termination message:
// a native sidecar is an init container, so its status is among
// initContainerStatuses.
func sidecarTermination(pod *corev1.Pod) (*sidecar.Timeline, bool) {
	if pod == nil {
		return nil, false
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name != deploy.SidecarContainerName || cs.State.Terminated == nil {
			continue
		}
		tl, err := sidecar.ParseTimeline([]byte(cs.State.Terminated.Message))
		if err != nil {
			return nil, false
		}
		return &tl, true
	}
	return nil, false
}

// appExit is the first app container's terminated state, as the kubelet
// reports it (finishedAt, 1 s).
func appExit(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	if pod == nil {
		return nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

// sidecarTimeline reads the sidecar's GET /timeline through the pod proxy
// (p.port is its --listen port).
func (p probeClient) sidecarTimeline(ctx context.Context, pod string) (*sidecar.Timeline, error) {
	body, err := p.get(ctx, pod, "timeline")
	if err != nil {
		return nil, fmt.Errorf("read the sidecar's timeline of pod %s/%s through the pod proxy (needs get pods/proxy): %w", p.ns, pod, err)
	}
	tl, err := sidecar.ParseTimeline(body)
	if err != nil {
		return nil, fmt.Errorf("%w (use the same epwindow version for the sidecar image)", err)
	}
	return &tl, nil
}
