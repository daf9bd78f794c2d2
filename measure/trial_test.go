package measure

import (
	"testing"
	"time"

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
