package batchperiod

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/epwindow/epwindow/deploy/local/e2e/testenv"
	"github.com/epwindow/epwindow/internal/localcluster"
)

// batchPeriod is injected into the EndpointSlice controller.
const batchPeriod = time.Second

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	localcluster.Main(m, "deploy/local/e2e/batchperiod", localcluster.Options{Nodes: 2, BatchPeriod: batchPeriod, IngressPoll: 3 * time.Second}, func(c *localcluster.Cluster) error { cluster = c; return nil })
}

// sleepers is a Deployment of pods that run `sleep`, ready once their
// shell has installed its SIGTERM trap (testenv.IgnoringTERM, markers in
// dir). They ignore SIGTERM, so a deleted pod stays terminating for its
// whole grace period and the slice shows it ready=false rather than
// dropping it.
func sleepers(name, dir string, replicas int32) *appsv1.Deployment {
	c := testenv.IgnoringTERM("sleep", dir)
	c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	labels := map[string]string{"app": name}
	grace := int64(5)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers:                    []corev1.Container{c},
				},
			},
		},
	}
}

// TestBatchPeriodDelaysSliceUpdate deletes pods one at a time and times
// delete → the endpoint's ready=false in the slice on this test's clock.
func TestBatchPeriodDelaysSliceUpdate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := cluster.Client
	ns, err := testenv.CreateNamespace(ctx, cs, "batch")
	if err != nil {
		t.Fatal(err)
	}
	const name = "sleepers"
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, sleepers(name, t.TempDir(), 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, testenv.Service(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const trials = 3
	for i := 0; i < trials; i++ {
		// A Ready pod whose address the slice lists as ready, with no sync
		// pending in the controller: a pod or slice event queues the
		// Service with AddAfter(batch period), and a later AddAfter does
		// not push an already waiting entry back (client-go
		// util/workqueue/delaying_queue.go keeps the earlier readyAt). A
		// sync queued by an event shortly before the delete would carry
		// the deletion with it, sooner than the batch period. So the pods
		// and slices must have been unchanged for a whole batch period
		// (plus 200 ms for this poll's and the informers' delivery). A
		// slice change queues a sync after max(1 s, batch period)
		// (endpointSliceChangeMinSyncDelay, queueServiceForEndpointSlice in
		// pkg/controller/endpointslice/endpointslice_controller.go): with
		// this 1 s period, the same wait covers it.
		var victim, ip string
		var seen string
		var since time.Time
		err := testenv.Poll(ctx, "a Ready pod listed ready in the slice, nothing changed for a batch period", 100*time.Millisecond, 90*time.Second, func() (bool, error) {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			sl, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
			if err != nil {
				return false, err
			}
			eps := testenv.SliceEndpoints(sl.Items)
			ready := 0
			var versions []string
			for _, p := range pods.Items {
				versions = append(versions, p.Name+"@"+p.ResourceVersion)
				if p.DeletionTimestamp == nil && testenv.PodReady(&p) && eps[p.Status.PodIP].Ready {
					victim, ip = p.Name, p.Status.PodIP
					ready++
				}
			}
			for _, e := range sl.Items {
				versions = append(versions, e.Name+"@"+e.ResourceVersion)
			}
			if v := strings.Join(versions, ","); v != seen {
				seen, since = v, time.Now()
			}
			return ready == 2 && time.Since(since) >= batchPeriod+200*time.Millisecond, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		w, err := cs.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := cs.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			w.Stop()
			t.Fatal(err)
		}
		d, err := untilNotReady(w, ip, t0, 30*time.Second)
		w.Stop()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("batch period %s: delete → slice not-ready %s (trial %d)\n", batchPeriod, d.Round(time.Millisecond), i+1)
		// The controller holds the change for exactly the batch period
		// (pkg/controller/endpointslice: queue.AddAfter(key,
		// endpointUpdatesBatchPeriod)), and no earlier sync was pending
		// (above), so the update cannot come sooner. Later by up to 1 s is the controller's own retry when
		// its slice cache is stale (real behaviour), plus up to 0.5 s of
		// watch delivery and scheduling on a busy 2-core machine.
		if d < batchPeriod || d > batchPeriod+1500*time.Millisecond {
			t.Errorf("trial %d: slice not-ready %s after the delete, want within [%s, %s]", i+1, d, batchPeriod, batchPeriod+1500*time.Millisecond)
		}
	}
}

func untilNotReady(w watch.Interface, ip string, t0 time.Time, timeout time.Duration) (time.Duration, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("EndpointSlice watch closed")
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			s := ev.Object.(*discoveryv1.EndpointSlice)
			// Not ready, or gone (one slice per Service here, so gone
			// from it means gone from the Service).
			if st, ok := testenv.SliceEndpoints([]discoveryv1.EndpointSlice{*s})[ip]; !ok || !st.Ready {
				return time.Since(t0), nil
			}
		case <-deadline:
			return 0, fmt.Errorf("slice never showed %s not ready within %s", ip, timeout)
		}
	}
}
