package measure

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/epwindow/epwindow/internal/localcluster"
)

// BenchmarkStampSliceEvent measures, on the local cluster, what stamping an
// EndpointSlice event costs when the Service has 5,000 endpoints (50 slices
// of 100): each event makes the handler re-evaluate the trial's address over
// every slice, and the next event's stamp waits for that. It reports
//   - handle-p50-ns / handle-p99-ns: stamp → end of handling (the delay the
//     next event's stamp can suffer; goal p99 < 1 ms),
//   - deliver-p50-ns / deliver-p99-ns: update acknowledged by the API
//     server → stamped (watch delivery, for context),
//   - stamp-ns: the stamp itself (clock read), taken before any lock.
//
// Run it with `make bench` (needs make cluster).
func BenchmarkStampSliceEvent(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	const ns, svc, perSlice, nSlices = "epwindow-bench", "big", 100, 50
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	// A selector-less Service: its slices are ours, the controller leaves them alone.
	if _, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8080}}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var sliceNames []string
	for i := range nSlices {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", svc, i), Labels: map[string]string{
				discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "epwindow-bench"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080)}},
		}
		for j := range perSlice {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.245.%d.%d", i, j+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		sliceNames = append(sliceNames, s.Name)
	}
	defer client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})

	w := newWatcher(client, clock.RealClock{}, ns, labels.Everything(), svc)
	var mu sync.Mutex
	var handle []time.Duration
	var lastSeen time.Time
	w.handled = func(seen time.Time) {
		d := time.Since(seen)
		mu.Lock()
		handle = append(handle, d)
		lastSeen = seen
		mu.Unlock()
	}
	if err := w.start(ctx); err != nil {
		b.Fatal(err)
	}
	// The trial's address is in the last slice: every event scans them all.
	w.begin(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim", UID: "victim"}}, netip.MustParseAddr(fmt.Sprintf("10.245.%d.%d", nSlices-1, perSlice)))
	mu.Lock()
	handle = handle[:0]
	mu.Unlock()

	var deliver []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := sliceNames[i%nSlices]
		s, err := client.DiscoveryV1().EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		// Flip serving, so that every update changes the object and makes
		// a watch event (an update that changes nothing makes none).
		c := &s.Endpoints[i%perSlice].Conditions
		c.Serving = ptr.To(c.Serving != nil && !*c.Serving)
		mu.Lock()
		before := len(handle)
		mu.Unlock()
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		// Wait for this update's event.
		for deadline := time.Now().Add(5 * time.Second); ; {
			<-time.After(200 * time.Microsecond)
			mu.Lock()
			n := len(handle)
			mu.Unlock()
			if n > before {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("update %d never reached the watch", i)
			}
		}
		mu.Lock()
		deliver = append(deliver, lastSeen.Sub(acked))
		mu.Unlock()
	}
	b.StopTimer()
	stampCost := testing.Benchmark(func(b *testing.B) {
		clk := clock.RealClock{}
		for i := 0; i < b.N; i++ {
			_ = clk.Now()
		}
	})
	mu.Lock()
	defer mu.Unlock()
	b.ReportMetric(float64(pct(handle, 0.5)), "handle-p50-ns")
	b.ReportMetric(float64(pct(handle, 0.99)), "handle-p99-ns")
	b.ReportMetric(float64(pct(deliver, 0.5)), "deliver-p50-ns")
	b.ReportMetric(float64(pct(deliver, 0.99)), "deliver-p99-ns")
	b.ReportMetric(float64(stampCost.NsPerOp()), "stamp-ns")
}

func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
