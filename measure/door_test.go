package measure

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// An event is stamped when the watch stream hands it over, not when a
// handler gets to it: here the consumer reads it 5 s later (a backlog in
// the informer's queues), and the handler still sees the arrival instant.
func TestDoorStampsOnArrival(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	fc := clocktesting.NewFakeClock(t0)
	d := newDoor(fc)
	fw := watch.NewFake()
	sw, err := d.wrap(fw, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1", ResourceVersion: "7"}}
	go fw.Modify(pod)
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		n := len(d.at)
		d.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the door never stamped the event")
		}
		time.Sleep(time.Millisecond)
	}
	fc.Step(5 * time.Second)
	ev := <-sw.ResultChan()
	if ev.Type != watch.Modified || ev.Object != pod {
		t.Fatalf("forwarded %v %v, want the Modified pod unchanged", ev.Type, ev.Object)
	}
	if got := d.seen(ev.Object); !got.Equal(t0) {
		t.Errorf("seen = %v, want the arrival %v", got, t0)
	}
	// Taken once: the same object again (a relist delivers it) is stamped now.
	if got := d.seen(pod); !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("seen a second time = %v, want now (%v)", got, t0.Add(5*time.Second))
	}
	// A final state from a relist carries the object inside.
	d.stamp(pod)
	if got, ok := d.take(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}); !ok || !got.Equal(t0.Add(5*time.Second)) {
		t.Errorf("take(DeletedFinalStateUnknown) = %v, %v", got, ok)
	}
	// Stop ends the forwarding and closes the channel the reflector reads.
	sw.Stop()
	sw.Stop()
	if _, open := <-sw.ResultChan(); open {
		t.Error("result channel still open after Stop")
	}
}

// A different resourceVersion of the same object is a different event.
func TestDoorKeysByResourceVersion(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	fc := clocktesting.NewFakeClock(t0)
	d := newDoor(fc)
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", ResourceVersion: "1"}}
	b := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", ResourceVersion: "2"}}
	d.stamp(a)
	fc.Step(time.Second)
	d.stamp(b)
	fc.Step(time.Second)
	if got := d.seen(b); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("seen(rv 2) = %v, want %v", got, t0.Add(time.Second))
	}
	if got := d.seen(a); !got.Equal(t0) {
		t.Errorf("seen(rv 1) = %v, want %v", got, t0)
	}
}
