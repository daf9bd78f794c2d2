package measure

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
