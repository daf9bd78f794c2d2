package measure

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

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
	// slice names the EndpointSlice that held the address (the last one
	// seen holding it): with many slices per Service, the slice stages are
	// that slice's writes. sliceWrites counts the Service's slice writes
	// delivered while the trial ran (the EndpointSlice controller rewrites
	// only slices whose endpoints changed: a graceful deletion is two
	// writes of the holding slice, terminating then removal, and the
	// replacement's arrival one or two more, possibly in another slice).
	slice       string
	sliceWrites int
	// lastPod is the latest object seen, for the container's termination
	// message and exit time.
	lastPod *corev1.Pod
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
	w.startups.podEvent(seen, pod, deleted, w.cachedSlices)
	w.mu.Lock()
	defer w.notify()
	defer w.mu.Unlock()
	tw := w.trials[pod.UID]
	if tw == nil && w.follow != nil && pod.DeletionTimestamp != nil && !deleted && w.follow(pod) {
		if addr, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			tw = &trialWatch{pod: pod.Name, uid: pod.UID, addr: addr, t0: seen}
			tw.slice = holdingSlice(slices.Collect(maps.Values(w.seenSlices)), addr)
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

// sliceEvent applies one EndpointSlice event, stamped seen, to every trial:
// the event's own object replaces (or, deleted, removes) its slice in
// seenSlices, and the trials see the Service's slices as of this event.
func (w *watcher) sliceEvent(seen time.Time, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	w.mu.Lock()
	if deleted {
		delete(w.seenSlices, s.Name)
	} else {
		w.seenSlices[s.Name] = s
	}
	for _, tw := range w.trials {
		tw.sliceWrites++
		if !deleted && sliceHolds(s, tw.addr) {
			tw.slice = s.Name
		}
		w.applySlices(tw, seen)
	}
	seenNow := slices.Collect(maps.Values(w.seenSlices))
	w.mu.Unlock()
	w.startups.sliceEvent(seen, seenNow)
	w.notify()
}

// cachedSlices are the Service's slices in the informer's cache (nil if
// they cannot be listed).
func (w *watcher) cachedSlices() []*discoveryv1.EndpointSlice {
	slices, err := w.slices.EndpointSlices(w.ns).List(w.sliceSel)
	if err != nil {
		return nil
	}
	return slices
}

// applySlices applies the slices as the events so far left them to tw; the
// caller holds w.mu.
func (w *watcher) applySlices(tw *trialWatch, seen time.Time) {
	applySliceState(tw, seen, slices.Collect(maps.Values(w.seenSlices)))
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
	tw := &trialWatch{pod: pod.Name, uid: pod.UID, addr: addr, lastPod: pod}
	tw.slice = holdingSlice(slices.Collect(maps.Values(w.seenSlices)), addr)
	w.trials[pod.UID] = tw
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
