package measure

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	listersdiscoveryv1 "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// maxWatchErrors bounds the remembered watch failures; a trial needs only to
// know whether one fell inside it.
const maxWatchErrors = 256

// watcher stamps the probe pods' and the Service's EndpointSlice events for
// the trial in progress. Handlers stamp on the tool's clock before taking any
// lock: informer handlers run after client-go's DeltaFIFO and the shared
// processor's buffer (tools/cache/shared_informer.go processorListener), so
// the stamp is watch delivery plus that hand-off, ~ms on an idle tool.
type watcher struct {
	clock     clock.PassiveClock
	factories []informers.SharedInformerFactory
	pods      listerscorev1.PodLister
	slices    listersdiscoveryv1.EndpointSliceLister
	podSel    labels.Selector
	sliceSel  labels.Selector
	ns        string

	mu sync.Mutex
	// trials are the trials in progress, by pod UID: one at a time in
	// delete mode, several at once in a rollout.
	trials    map[types.UID]*trialWatch
	watchErrs []watchError
	changed   chan struct{} // signalled (non-blocking) on any event
	// follow, when set (rollout mode), makes the first sight of a
	// terminating pod begin a trial by itself: T0 is that sight.
	follow   func(*corev1.Pod) bool
	followed []*trialWatch // begun by follow, not yet taken by the runner
}

type watchError struct {
	at       time.Time
	resource string
	err      string
}

// trialWatch holds what the watches saw of one trial's pod and address. All
// instants are on the tool's clock except serverDeleteTime.
type trialWatch struct {
	pod  string
	uid  types.UID
	addr netip.Addr
	// t0 is set for trials begun by the watch itself (rollout mode): the
	// first sight of the pod terminating, tool clock, watch delivery.
	t0 time.Time

	// PodTerminatingSeen: pod watch, first event with deletionTimestamp, tool clock, ~ms.
	terminatingSeen time.Time
	// ServerDeleteTime: deletionTimestamp − deletionGracePeriodSeconds, API server clock, 1 s.
	serverDeleteTime time.Time
	// PodDeleted: pod watch DELETED event, tool clock, ~ms.
	podDeleted time.Time
	// deletedOnRelist is set when the deletion was only inferred from a relist
	// (DeletedFinalStateUnknown): its instant is not a watch delivery.
	deletedOnRelist bool
	// SliceNotReady / SliceNotServing / SliceRemoved: EndpointSlice watch, tool clock, ~ms.
	sliceNotReady   time.Time
	sliceNotServing time.Time
	sliceRemoved    time.Time
	// lastPod is the latest object seen, for the container's termination
	// message and exit time.
	lastPod *corev1.Pod
}

func newWatcher(client kubernetes.Interface, clk clock.PassiveClock, ns string, podSel labels.Selector, service string) *watcher {
	sliceSel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service})
	// Two factories, because each informer has its own label selector.
	podF := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = podSel.String() }))
	sliceF := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sliceSel.String() }))
	w := &watcher{clock: clk, factories: []informers.SharedInformerFactory{podF, sliceF}, ns: ns, podSel: podSel,
		sliceSel: sliceSel, changed: make(chan struct{}, 1), trials: map[types.UID]*trialWatch{}}
	podInf := podF.Core().V1().Pods().Informer()
	sliceInf := sliceF.Discovery().V1().EndpointSlices().Informer()
	_ = podInf.SetWatchErrorHandlerWithContext(w.watchErrorHandler("pods"))
	_ = sliceInf.SetWatchErrorHandlerWithContext(w.watchErrorHandler("endpointslices"))
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.podEvent(w.clock.Now(), obj, false) },
		UpdateFunc: func(_, obj any) { w.podEvent(w.clock.Now(), obj, false) },
		DeleteFunc: func(obj any) { w.podEvent(w.clock.Now(), obj, true) },
	})
	_, _ = sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.sliceEvent(w.clock.Now()) },
		UpdateFunc: func(_, _ any) { w.sliceEvent(w.clock.Now()) },
		DeleteFunc: func(any) { w.sliceEvent(w.clock.Now()) },
	})
	w.pods = podF.Core().V1().Pods().Lister()
	w.slices = sliceF.Discovery().V1().EndpointSlices().Lister()
	return w
}

// start runs the informers and waits for their first list.
func (w *watcher) start(ctx context.Context) error {
	for _, f := range w.factories {
		f.Start(ctx.Done())
	}
	for _, f := range w.factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("watch %v in namespace %q: cache never synced: %w", typ, w.ns, context.Cause(ctx))
			}
		}
	}
	return nil
}

func (w *watcher) watchErrorHandler(resource string) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		at := w.clock.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.watchErrs) == maxWatchErrors {
			w.watchErrs = w.watchErrs[1:]
		}
		w.watchErrs = append(w.watchErrs, watchError{at: at, resource: resource, err: err.Error()})
	}
}

// watchErrorBetween returns the first watch failure in [from, to], if any.
func (w *watcher) watchErrorBetween(from, to time.Time) (watchError, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.watchErrs {
		if !e.at.Before(from) && !e.at.After(to) {
			return e, true
		}
	}
	return watchError{}, false
}

func (w *watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *watcher) podEvent(seen time.Time, obj any, deleted bool) {
	relist := false
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, relist = d.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.notify()
	defer w.mu.Unlock()
	tw := w.trials[pod.UID]
	if tw == nil && w.follow != nil && pod.DeletionTimestamp != nil && !deleted && w.follow(pod) {
		if addr, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			tw = &trialWatch{pod: pod.Name, uid: pod.UID, addr: addr, t0: seen}
			w.trials[pod.UID] = tw
			w.followed = append(w.followed, tw)
			w.applySlices(tw, seen)
		}
	}
	if tw == nil {
		return
	}
	applyPodEvent(tw, seen, pod, deleted, relist)
}

// applyPodEvent records what one pod event tells about the trial's pod.
func applyPodEvent(tw *trialWatch, seen time.Time, pod *corev1.Pod, deleted, relist bool) {
	tw.lastPod = pod
	if pod.DeletionTimestamp != nil && tw.terminatingSeen.IsZero() {
		tw.terminatingSeen = seen
		// deletionTimestamp = request time + grace (apiserver
		// registry/rest/delete.go BeforeDelete), at 1 s resolution.
		grace := int64(0)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = *pod.DeletionGracePeriodSeconds
		}
		tw.serverDeleteTime = pod.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
	}
	if deleted && tw.podDeleted.IsZero() {
		tw.podDeleted = seen
		tw.deletedOnRelist = relist
	}
}

func (w *watcher) sliceEvent(seen time.Time) {
	w.mu.Lock()
	for _, tw := range w.trials {
		w.applySlices(tw, seen)
	}
	w.mu.Unlock()
	w.notify()
}

// applySlices applies the cached slices to tw; the caller holds w.mu.
func (w *watcher) applySlices(tw *trialWatch, seen time.Time) {
	slices, err := w.slices.EndpointSlices(w.ns).List(w.sliceSel)
	if err != nil {
		return
	}
	applySliceState(tw, seen, slices)
}

// applySliceState records the first instants at which the trial's address
// stopped being ready, stopped serving, and left every slice. A removal seen
// before a not-ready update (the controller's batching can merge them) sets
// the earlier stages too: the address stopped being ready no later than that.
func applySliceState(tw *trialWatch, seen time.Time, slices []*discoveryv1.EndpointSlice) {
	st, found := addressState(slices, tw.addr)
	if (!found || !st.Ready || st.Terminating) && tw.sliceNotReady.IsZero() {
		tw.sliceNotReady = seen
	}
	if (!found || !st.Serving) && tw.sliceNotServing.IsZero() {
		tw.sliceNotServing = seen
	}
	if !found && tw.sliceRemoved.IsZero() {
		tw.sliceRemoved = seen
	}
}

// begin makes pod a trial in progress. The address must be ready in the
// slices now, or the first event would record a stale state.
func (w *watcher) begin(pod *corev1.Pod, addr netip.Addr) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.trials[pod.UID] = &trialWatch{pod: pod.Name, uid: pod.UID, addr: addr, lastPod: pod}
}

// end stops attributing events to the trial of uid and returns what was seen.
func (w *watcher) end(uid types.UID) trialWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := *w.trials[uid]
	delete(w.trials, uid)
	return tw
}

// snapshot returns a copy of the trial of uid.
func (w *watcher) snapshot(uid types.UID) trialWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return *w.trials[uid]
}

// takeFollowed returns the trials follow began since the last call.
func (w *watcher) takeFollowed() []*trialWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.followed
	w.followed = nil
	return out
}

// setFollow sets (or, with nil, clears) the rollout mode's rule for which
// terminating pods begin a trial by themselves.
func (w *watcher) setFollow(f func(*corev1.Pod) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.follow = f
}
