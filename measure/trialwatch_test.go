package measure

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func TestApplySliceState(t *testing.T) {
	addr := netip.MustParseAddr("10.244.0.7")
	tw := &trialWatch{addr: addr}
	tr, fa := true, false
	ready := []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", &tr, &tr, &fa))}
	applySliceState(tw, at(1), ready)
	if !tw.sliceNotReady.IsZero() {
		t.Fatal("ready address recorded as not ready")
	}
	applySliceState(tw, at(10), []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", &fa, &tr, &tr))})
	applySliceState(tw, at(20), []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", &fa, &fa, &tr))})
	applySliceState(tw, at(30), []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", &fa, &fa, &tr))})
	applySliceState(tw, at(40), []*discoveryv1.EndpointSlice{slice()})
	if tw.sliceNotReady != at(10) || tw.sliceNotServing != at(20) || tw.sliceRemoved != at(40) {
		t.Fatalf("stages %v %v %v; want first instants 10, 20, 40 ms", tw.sliceNotReady, tw.sliceNotServing, tw.sliceRemoved)
	}

	// A removal that arrives without a not-ready update first (merged by
	// the controller's batching) sets all three at once.
	tw = &trialWatch{addr: addr}
	applySliceState(tw, at(50), []*discoveryv1.EndpointSlice{slice()})
	if tw.sliceNotReady != at(50) || tw.sliceNotServing != at(50) || tw.sliceRemoved != at(50) {
		t.Fatalf("merged removal: %v %v %v", tw.sliceNotReady, tw.sliceNotServing, tw.sliceRemoved)
	}
}

func TestApplyPodEvent(t *testing.T) {
	tw := &trialWatch{uid: "u1"}
	grace := int64(70)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}
	applyPodEvent(tw, at(1), pod, false, false)
	if !tw.terminatingSeen.IsZero() {
		t.Fatal("terminating without deletionTimestamp")
	}
	del := metav1.NewTime(t0.Add(70 * time.Second).Truncate(time.Second))
	terminating := pod.DeepCopy()
	terminating.DeletionTimestamp, terminating.DeletionGracePeriodSeconds = &del, &grace
	applyPodEvent(tw, at(5), terminating, false, false)
	applyPodEvent(tw, at(9), terminating, false, false)
	applyPodEvent(tw, at(900), terminating, true, true)
	if tw.terminatingSeen != at(5) || tw.serverDeleteTime != t0 || tw.podDeleted != at(900) || !tw.deletedOnRelist {
		t.Fatalf("got %+v", tw)
	}
}

// Each EndpointSlice event is applied with its own object, in delivery
// order: while the informer's indexer already holds the slice without the
// address (the removal, delivered later), the earlier not-ready event still
// stamps only slice_not_ready, and the address moving to a second slice is
// not a removal.
func TestSliceEventsAppliedInDeliveryOrder(t *testing.T) {
	addr := netip.MustParseAddr("10.244.0.7")
	tr, fa := true, false
	named := func(name string, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
		s.Name = name
		return s
	}
	w := &watcher{trials: map[types.UID]*trialWatch{}, seenSlices: map[string]*discoveryv1.EndpointSlice{}, changed: make(chan struct{}, 1), startups: newStartups()}
	w.sliceEvent(at(0), named("a", slice(ep("10.244.0.7", &tr, &tr, &fa), ep("10.244.0.8", &tr, &tr, &fa))), false)
	w.begin(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "p"}}, addr)
	w.sliceEvent(at(10), named("a", slice(ep("10.244.0.7", &fa, &tr, &tr), ep("10.244.0.8", &tr, &tr, &fa))), false)
	if tw := w.snapshot("u1"); tw.sliceNotReady != at(10) || !tw.sliceNotServing.IsZero() || !tw.sliceRemoved.IsZero() {
		t.Fatalf("after the not-ready event: %v %v %v; want only slice_not_ready at 10ms", tw.sliceNotReady, tw.sliceNotServing, tw.sliceRemoved)
	}
	// The address moves: slice b gets it before slice a drops it.
	w.sliceEvent(at(20), named("b", slice(ep("10.244.0.7", &fa, &tr, &tr))), false)
	w.sliceEvent(at(30), named("a", slice(ep("10.244.0.8", &tr, &tr, &fa))), false)
	if tw := w.snapshot("u1"); !tw.sliceRemoved.IsZero() || !tw.sliceNotServing.IsZero() {
		t.Fatalf("a move between slices read as removal (%v) or not serving (%v)", tw.sliceRemoved, tw.sliceNotServing)
	}
	w.sliceEvent(at(40), cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: named("b", slice())}, true)
	if tw := w.end("u1"); tw.sliceRemoved != at(40) || tw.sliceNotServing != at(40) {
		t.Fatalf("removal with slice b's deletion: removed %v not serving %v; want 40ms", tw.sliceRemoved, tw.sliceNotServing)
	}
}
