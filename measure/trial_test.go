package measure

import (
	"testing"
	"time"

	"github.com/epwindow/epwindow/measure/load"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPickPodOldestFirst(t *testing.T) {
	mk := func(name string, s int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(s) * time.Second))}}
	}
	if got := pickPod([]*corev1.Pod{mk("c", 5), mk("b", 1), mk("a", 1)}); got.Name != "a" {
		t.Fatalf("picked %s, want the oldest with the smallest name (a)", got.Name)
	}
	if pickPod(nil) != nil {
		t.Fatal("picked a pod from none")
	}
}

// A runner that opened its streams before the oldest pod was Ready holds
// none there: the victim is the oldest pod holding a stream of every
// holder, so the trial follows the runner's streams too.
func TestPickPodHoldsEveryHoldersStreams(t *testing.T) {
	mk := func(name string, s int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(s) * time.Second))}}
	}
	pods := []*corev1.Pod{mk("a", 1), mk("b", 2), mk("c", 3)}
	ev := []load.StreamEvent{
		{Slot: 0, Kind: load.EventOpen, Pod: "b"},
		{Slot: 1, Kind: load.EventOpen, Pod: "c"},
		{Slot: 2, Kind: load.EventOpen, Pod: "b"},
		{Slot: 2, Kind: load.EventClose},
		{Slot: 2, Kind: load.EventOpen, Pod: "c"},
	}
	runner := load.OpenByPod(ev)
	if runner["b"] != 1 || runner["c"] != 2 || runner["a"] != 0 {
		t.Fatalf("open by pod %v, want b:1 c:2", runner)
	}
	tool := map[string]int{"a": 3, "b": 3, "c": 4}
	if got := pickPod(pods, tool, runner); got.Name != "b" {
		t.Fatalf("picked %s, want b: the oldest holding both holders' streams", got.Name)
	}
	// No pod holds a stream of every holder: the oldest of all.
	if got := pickPod(pods, map[string]int{"a": 1}, map[string]int{"c": 1}); got.Name != "a" {
		t.Fatalf("picked %s, want the oldest (a) when no pod holds every holder's streams", got.Name)
	}
}
