package measure

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A Service of 30 endpoints over 6 slices of 5 (the EndpointSlice
// controller at --max-endpoints-per-slice 5). The trial's pod is in slice
// s3: its stages come from s3's writes, while a write of another slice in
// between (the replacement arriving in s5, unrelated pods) changes none of
// them; the record names s3 and counts every slice write the trial saw.
func TestManySlicesStagesFollowTheHoldingSlice(t *testing.T) {
	tr, fa := true, false
	addrOf := func(i int) string { return fmt.Sprintf("10.244.0.%d", 10+i) }
	build := func(name string, from, to int, override map[int]discoveryv1.Endpoint, extra ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		var eps []discoveryv1.Endpoint
		for i := from; i < to; i++ {
			if e, ok := override[i]; ok {
				if e.Addresses != nil {
					eps = append(eps, e)
				}
				continue
			}
			eps = append(eps, ep(addrOf(i), &tr, &tr, &fa))
		}
		s := slice(append(eps, extra...)...)
		s.Name = name
		return s
	}
	w := &watcher{trials: map[types.UID]*trialWatch{}, seenSlices: map[string]*discoveryv1.EndpointSlice{}, changed: make(chan struct{}, 1), startups: newStartups()}
	for k := range 6 {
		w.sliceEvent(at(0), build(fmt.Sprintf("s%d", k), 5*k, 5*k+5, nil), false)
	}
	const victim = 17 // in s3 (endpoints 15..19)
	addr := netip.MustParseAddr(addrOf(victim))
	w.begin(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "p17"}}, addr)
	if tw := w.snapshot("u1"); tw.slice != "s3" {
		t.Fatalf("at begin the holding slice is %q, want s3", tw.slice)
	}
	// An unrelated write to s1 (another pod turned not ready) first.
	w.sliceEvent(at(5), build("s1", 5, 10, map[int]discoveryv1.Endpoint{6: ep(addrOf(6), &fa, &fa, &fa)}), false)
	if tw := w.snapshot("u1"); !tw.sliceNotReady.IsZero() {
		t.Fatalf("a write of s1 stamped slice_not_ready for an address in s3 (%v)", tw.sliceNotReady)
	}
	// s3: terminating, then (the replacement lands in s5) removal.
	w.sliceEvent(at(10), build("s3", 15, 20, map[int]discoveryv1.Endpoint{victim: ep(addrOf(victim), &fa, &tr, &tr)}), false)
	w.sliceEvent(at(15), build("s5", 25, 30, nil, ep("10.244.1.99", &fa, &fa, &fa)), false)
	w.sliceEvent(at(20), build("s3", 15, 20, map[int]discoveryv1.Endpoint{victim: {}}), false)
	tw := w.end("u1")
	if tw.sliceNotReady != at(10) || tw.sliceNotServing != at(20) || tw.sliceRemoved != at(20) {
		t.Errorf("stages not ready %v, not serving %v, removed %v; want 10, 20, 20 ms (s3's writes)", tw.sliceNotReady, tw.sliceNotServing, tw.sliceRemoved)
	}
	if tw.slice != "s3" || tw.sliceWrites != 4 {
		t.Errorf("slice %q, %d writes; want s3 and 4 (s1, s3, s5, s3)", tw.slice, tw.sliceWrites)
	}
	rec := buildRecord(trialInput{watch: tw, addr: addr, t0: at(0)})
	if rec.Slice != "s3" || rec.SliceWrites != 4 {
		t.Errorf("record names slice %q with %d writes, want s3, 4", rec.Slice, rec.SliceWrites)
	}
}
