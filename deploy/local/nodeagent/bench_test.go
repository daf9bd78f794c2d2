package nodeagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkPodLifecycle reports the agent's own overhead per pod, against
// a fake API: create → Ready (netns, CNI ADD, shim, exec; no readiness
// probe, so Ready at start) and delete → object gone for an app that exits
// at SIGTERM (SIGTERM, exit, CNI DEL, netns removal, status, DELETE).
func BenchmarkPodLifecycle(b *testing.B) {
	client, _ := startTestAgent(b)
	b.ResetTimer()
	var start, stop time.Duration
	for i := 0; i < b.N; i++ {
		pod := testPod(fmt.Sprintf("bench-%d", i%10))
		pod.UID = types.UID(fmt.Sprintf("b0000000-0000-4000-8000-%012d", i))
		pod.Spec.Containers[0].ReadinessProbe = nil
		pod.Spec.Containers[0].Lifecycle = nil
		t0 := time.Now()
		if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		waitPod(b, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
		start += time.Since(t0)
		del := deleteGracefully(b, client, pod.Name)
		del.wait(b, 30*time.Second, "deleted", func(_ *v1.Pod, ev watch.EventType) bool { return ev == watch.Deleted })
		stop += time.Since(del.t0)
		del.w.Stop()
	}
	b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "ms/start")
	b.ReportMetric(float64(stop.Milliseconds())/float64(b.N), "ms/teardown")
}
