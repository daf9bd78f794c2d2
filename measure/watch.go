package measure

import (
	"context"
	"fmt"
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
	// running counts the informer goroutines start began (see wait).
	running sync.WaitGroup
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
	trials map[types.UID]*trialWatch
	// seenSlices are the Service's EndpointSlices by name as the handler
	// applied them, one event's own object at a time in delivery order:
	// the state each stamp describes. The informer's indexer is updated
	// before a handler runs and may already hold a later state.
	seenSlices map[string]*discoveryv1.EndpointSlice
	watchErrs  []watchError
	changed    chan struct{} // signalled (non-blocking) on any event
	// follow, when set (rollout mode), makes the first sight of a
	// terminating pod begin a trial by itself: T0 is that sight.
	follow   func(*corev1.Pod) bool
	followed []*trialWatch // begun by follow, not yet taken by the runner
	// startups follows the new pods (replacements), with a lock of its own.
	startups *startups
}

type watchError struct {
	at       time.Time
	resource string
	err      string
}

func newWatcher(client kubernetes.Interface, clk clock.PassiveClock, ns string, podSel labels.Selector, service string) *watcher {
	sliceSel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service})
	w := &watcher{clock: clk, door: newDoor(clk), ns: ns, podSel: podSel,
		sliceSel: sliceSel, changed: make(chan struct{}, 1), trials: map[types.UID]*trialWatch{}, startups: newStartups(),
		seenSlices: map[string]*discoveryv1.EndpointSlice{}}
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
	slice := w.handler(func(seen time.Time, obj any) { w.sliceEvent(seen, obj, false) })
	sliceGone := w.handler(func(seen time.Time, obj any) { w.sliceEvent(seen, obj, true) })
	_, _ = sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    slice,
		UpdateFunc: func(_, obj any) { slice(obj) },
		DeleteFunc: sliceGone,
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
		w.running.Add(1)
		go func() {
			defer w.running.Done()
			inf.RunWithContext(ctx)
		}()
	}
	for _, inf := range w.informers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("watch pods and endpointslices in namespace %q: cache never synced: %w", w.ns, context.Cause(ctx))
		}
	}
	return nil
}

// wait returns once every informer start began has stopped (its context
// ended).
func (w *watcher) wait() { w.running.Wait() }

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
