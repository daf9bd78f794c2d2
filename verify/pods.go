package verify

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// podState is what the tracker saw of one pod; instants on the tool's clock,
// stamped as the watch event is handled (watch delivery, ~ms).
type podState struct {
	name string
	uid  types.UID
	ip   string
	// hostIP is the node's address: the kubelet's probes come from it.
	hostIP string
	// hash is the pod-template-hash label: the ReplicaSet, so the
	// template, the pod is of.
	hash string
	// seen: first event; ready: first event with Ready=True; deleted: first
	// event with a deletionTimestamp; gone: the DELETED event; leftSlices:
	// after deleted, the first instant no EndpointSlice lists ip as ready.
	seen, ready, deleted, gone, leftSlices time.Time
	// exits are the terminated containers in the latest status seen.
	exits []PodExit
	// The check port, read through the pod proxy: first and last answer,
	// first failed read after deleted, and its error.
	firstAnswer, lastAnswer, firstRefusal time.Time
	refusalErr                            string
	// sidecar is the pod's epwindow sidecar (--sidecar).
	sidecar sidecarState
}

// tracker follows the pods of one Deployment and the readiness of their
// addresses in the namespace's EndpointSlices.
type tracker struct {
	client   kubernetes.Interface
	clk      clock.PassiveClock
	ns       string
	selector labels.Selector

	mu sync.Mutex
	// pods by UID; sliceReady: per slice (namespace/name), its ready addresses.
	pods       map[types.UID]*podState
	sliceReady map[string]map[string]bool
}

func newTracker(client kubernetes.Interface, clk clock.PassiveClock, ns string, sel labels.Selector) *tracker {
	return &tracker{client: client, clk: clk, ns: ns, selector: sel,
		pods: map[types.UID]*podState{}, sliceReady: map[string]map[string]bool{}}
}

// start runs the pod and EndpointSlice informers until ctx ends and waits
// for their first lists.
func (t *tracker) start(ctx context.Context) error {
	podsF := informers.NewSharedInformerFactoryWithOptions(t.client, 0, informers.WithNamespace(t.ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = t.selector.String() }))
	slicesF := informers.NewSharedInformerFactoryWithOptions(t.client, 0, informers.WithNamespace(t.ns))
	pi := podsF.Core().V1().Pods().Informer()
	si := slicesF.Discovery().V1().EndpointSlices().Informer()
	if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { t.onPod(t.clk.Now(), o, false) },
		UpdateFunc: func(_, o any) { t.onPod(t.clk.Now(), o, false) },
		DeleteFunc: func(o any) { t.onPod(t.clk.Now(), o, true) },
	}); err != nil {
		return fmt.Errorf("watch pods in %s: %w", t.ns, err)
	}
	if _, err := si.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { t.onSlice(t.clk.Now(), o, false) },
		UpdateFunc: func(_, o any) { t.onSlice(t.clk.Now(), o, false) },
		DeleteFunc: func(o any) { t.onSlice(t.clk.Now(), o, true) },
	}); err != nil {
		return fmt.Errorf("watch endpointslices in %s: %w", t.ns, err)
	}
	podsF.Start(ctx.Done())
	slicesF.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pi.HasSynced, si.HasSynced) {
		return fmt.Errorf("list pods and endpointslices in %s (needs list/watch on both): %w", t.ns, context.Cause(ctx))
	}
	return nil
}

// object returns an informer event's object as a T, unwrapping the
// tombstone of a deletion the watch missed.
func object[T any](o any) (T, bool) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	v, ok := o.(T)
	return v, ok
}

func (t *tracker) onPod(now time.Time, o any, deleted bool) {
	p, ok := object[*corev1.Pod](o)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.pods[p.UID]
	if s == nil {
		s = &podState{name: p.Name, uid: p.UID, seen: now}
		t.pods[p.UID] = s
	}
	if p.Status.PodIP != "" {
		s.ip = p.Status.PodIP
	}
	if p.Status.HostIP != "" {
		s.hostIP = p.Status.HostIP
	}
	if s.sidecar.port == 0 {
		s.sidecar.port = sidecarPort(p.Spec)
	}
	if s.sidecar.final == nil {
		if tl, ok, err := sidecarFinal(p); ok {
			s.sidecar.final = tl
			if err != nil {
				s.sidecar.finalErr = err.Error()
			}
		}
	}
	if h := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; h != "" {
		s.hash = h
	}
	if s.ready.IsZero() && podReady(p) && p.DeletionTimestamp == nil {
		s.ready = now
	}
	if s.deleted.IsZero() && (p.DeletionTimestamp != nil || deleted) {
		s.deleted = now
		if s.ip != "" && !t.addrReady(s.ip) {
			s.leftSlices = now
		}
	}
	if exits := podExits(p); len(exits) > 0 {
		s.exits = exits
	}
	if deleted && s.gone.IsZero() {
		s.gone = now
		if s.leftSlices.IsZero() {
			s.leftSlices = now
		}
	}
}

// podExits lists the pod's terminated containers: app, init and native
// sidecar (an init container with restartPolicy Always, which the kubelet
// stops after the app containers), each in its current state and, when it
// restarted, its last termination (LastTerminationState) — a container
// killed once and restarted is still a failed shutdown.
func podExits(p *corev1.Pod) []PodExit {
	sidecar := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecar[c.Name] = true
		}
	}
	var out []PodExit
	add := func(cs corev1.ContainerStatus, kind string) {
		if t := cs.LastTerminationState.Terminated; t != nil {
			out = append(out, PodExit{Pod: p.Name, Container: cs.Name, Kind: kind, Previous: true, ExitCode: t.ExitCode, Reason: t.Reason})
		}
		if t := cs.State.Terminated; t != nil {
			out = append(out, PodExit{Pod: p.Name, Container: cs.Name, Kind: kind, ExitCode: t.ExitCode, Reason: t.Reason})
		}
	}
	for _, cs := range p.Status.InitContainerStatuses {
		kind := ContainerInit
		if sidecar[cs.Name] {
			kind = ContainerSidecar
		}
		add(cs, kind)
	}
	for _, cs := range p.Status.ContainerStatuses {
		add(cs, "")
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (t *tracker) onSlice(now time.Time, o any, deleted bool) {
	s, ok := object[*discoveryv1.EndpointSlice](o)
	if !ok {
		return
	}
	key := s.Namespace + "/" + s.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	if deleted {
		delete(t.sliceReady, key)
	} else {
		t.sliceReady[key] = readyAddrs(s)
	}
	for _, p := range t.pods {
		if !p.deleted.IsZero() && p.leftSlices.IsZero() && p.ip != "" && !t.addrReady(p.ip) {
			p.leftSlices = now
		}
	}
}

// readyAddrs is the set of addresses a slice lists as ready (a nil Ready
// condition means ready: discovery/v1 EndpointConditions).
func readyAddrs(s *discoveryv1.EndpointSlice) map[string]bool {
	m := map[string]bool{}
	for _, e := range s.Endpoints {
		if e.Conditions.Ready != nil && !*e.Conditions.Ready {
			continue
		}
		for _, a := range e.Addresses {
			m[a] = true
		}
	}
	return m
}

// addrReady: some slice lists addr as ready. The caller holds mu.
func (t *tracker) addrReady(addr string) bool {
	for _, m := range t.sliceReady {
		if m[addr] {
			return true
		}
	}
	return false
}

// snapshot copies every pod's state.
func (t *tracker) snapshot() map[types.UID]podState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[types.UID]podState, len(t.pods))
	for uid, p := range t.pods {
		out[uid] = *p
	}
	return out
}

// alive returns the pods not deleted.
func (t *tracker) alive() map[types.UID]podState {
	out := map[types.UID]podState{}
	for uid, p := range t.snapshot() {
		if p.deleted.IsZero() {
			out[uid] = p
		}
	}
	return out
}

// readyPods counts the pods Ready and not deleted.
func (t *tracker) readyPods() []podState {
	var out []podState
	for _, p := range t.alive() {
		if !p.ready.IsZero() {
			out = append(out, p)
		}
	}
	return out
}

// listen records one read of a pod's check port: answered (any HTTP answer
// from the app) at `at`, or failed with err.
func (t *tracker) listen(uid types.UID, at time.Time, answered bool, err string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pods[uid]
	if p == nil {
		return
	}
	if answered {
		if p.firstAnswer.IsZero() {
			p.firstAnswer = at
		}
		if at.After(p.lastAnswer) {
			p.lastAnswer = at
		}
		return
	}
	if !p.deleted.IsZero() && !at.Before(p.deleted) && (p.firstRefusal.IsZero() || at.Before(p.firstRefusal)) {
		p.firstRefusal, p.refusalErr = at, err
	}
}
