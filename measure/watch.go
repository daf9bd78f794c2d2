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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
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
// the trial in progress. Each event is stamped on the tool's clock as the
// watch stream hands it over, before client-go queues it (see door): what a
// handler records is watch delivery, not delivery plus the informer's
// backlog.
type watcher struct {
	clock     clock.PassiveClock
	door      *door
	informers []cache.SharedIndexInformer
	// trace, when set, is told of every handled event: its arrival stamp,
	// and when its handler began and ended (make bench).
	trace    func(obj any, arrived, start, end time.Time)
	pods     listerscorev1.PodLister
	slices   listersdiscoveryv1.EndpointSliceLister
	podSel   labels.Selector
	sliceSel labels.Selector
	ns       string

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
	w := &watcher{clock: clk, door: newDoor(clk), ns: ns, podSel: podSel,
		sliceSel: sliceSel, changed: make(chan struct{}, 1), trials: map[types.UID]*trialWatch{}}
	// The informers client-go's factories build (informers/core/v1/pod.go),
	// with each watch passed through the door.
	pods, slices := client.CoreV1().Pods(ns), client.DiscoveryV1().EndpointSlices(ns)
	podInf := informer(w.door, client, &corev1.Pod{}, podSel, pods.List, pods.Watch)
	sliceInf := informer(w.door, client, &discoveryv1.EndpointSlice{}, sliceSel, slices.List, slices.Watch)
	_ = podInf.SetWatchErrorHandlerWithContext(w.watchErrorHandler("pods"))
	_ = sliceInf.SetWatchErrorHandlerWithContext(w.watchErrorHandler("endpointslices"))
	podSeen := w.handler(func(seen time.Time, obj any) { w.podEvent(seen, obj, false) })
	podGone := w.handler(func(seen time.Time, obj any) { w.podEvent(seen, obj, true) })
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    podSeen,
		UpdateFunc: func(_, obj any) { podSeen(obj) },
		DeleteFunc: podGone,
	})
	slice := w.handler(func(seen time.Time, _ any) { w.sliceEvent(seen) })
	_, _ = sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    slice,
		UpdateFunc: func(_, obj any) { slice(obj) },
		DeleteFunc: slice,
	})
	w.informers = []cache.SharedIndexInformer{podInf, sliceInf}
	w.pods = listerscorev1.NewPodLister(podInf.GetIndexer())
	w.slices = listersdiscoveryv1.NewEndpointSliceLister(sliceInf.GetIndexer())
	return w
}

// handler runs event with the arrival stamp of obj's watch event.
func (w *watcher) handler(event func(seen time.Time, obj any)) func(obj any) {
	return func(obj any) {
		start := w.clock.Now()
		seen := w.door.seen(obj)
		event(seen, obj)
		if w.trace != nil {
			w.trace(obj, seen, start, w.clock.Now())
		}
	}
}

// informer is a shared informer of obj's kind over list and watch,
// restricted to sel, whose watches pass through d.
func informer[L runtime.Object](d *door, client kubernetes.Interface, obj runtime.Object, sel labels.Selector,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel.String()
			l, err := list(ctx, o)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.String()
			return d.wrap(watchFn(ctx, o))
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), obj,
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
}

// start runs the informers and waits for their first list.
func (w *watcher) start(ctx context.Context) error {
	for _, inf := range w.informers {
		go inf.RunWithContext(ctx)
	}
	for _, inf := range w.informers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("watch pods and endpointslices in namespace %q: cache never synced: %w", w.ns, context.Cause(ctx))
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
