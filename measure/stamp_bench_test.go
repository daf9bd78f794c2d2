package measure

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/internal/localcluster"
)

// The stamping benchmark's Service: 50 slices of 100 endpoints, the
// EndpointSlice controller's default maxEndpointsPerSlice
// (pkg/controller/endpointslice: --max-endpoints-per-slice 100).
const (
	benchSlices        = 50
	benchPerSlice      = 100
	benchUpdates       = 1000
	benchWriters       = 4
	benchManagedBy     = "epwindow-bench"
	benchService       = "big"
	benchTrialSliceIdx = benchSlices - 1
)

// BenchmarkWatchStamp measures, on the local cluster, what stamping costs
// when the watched Service has 5,000 endpoints: the watcher follows a trial
// whose address is in the last slice (so every slice event scans all 5,000
// endpoints, as during a real trial) while benchWriters writers flip an
// endpoint's serving condition in turn across the slices, benchUpdates
// times, so every update is a change and one watch event.
//
// Reported per event: stamp-*-ns, the door's own work (clock read + map
// insert) — the goal is p99 < 1 ms; queue-*-ns, how long the event then
// waited in client-go's queues before its handler ran, which a stamp taken
// in the handler would have added to every stage; handle-*-ns, the
// handler's scan; deliver-*-ms, from the update's response to the event's
// arrival (the API server's watch fan-out, negative when the event overtook
// the response). Run with -benchtime 1x: one run starts a cluster.
func BenchmarkWatchStamp(b *testing.B) {
	for range b.N {
		benchWatchStamp(b)
	}
}

func benchWatchStamp(b *testing.B) {
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "stamp bench: "+format+"\n", args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	progress("starting the local cluster")
	c, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			b.Error(err)
		}
	}()
	// No client-side rate limit (the default 5 QPS would pace the writers).
	rc := rest.CopyConfig(c.Config)
	rc.QPS, rc.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	ns := "stampbench"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: benchService},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	// Selector-less Service, slices of our own (another managed-by, so the
	// EndpointSlice controller leaves them alone). The addresses (10.201/16)
	// are only data: nothing connects to them.
	progress("creating %d EndpointSlices of %d endpoints", benchSlices, benchPerSlice)
	sls := make([]*discoveryv1.EndpointSlice, benchSlices)
	for i := range sls {
		sl := benchSlice(ns, i)
		if sls[i], err = client.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}

	var (
		mu      sync.Mutex
		stamps  []time.Duration
		queue   []time.Duration
		handle  []time.Duration
		arrived = map[string]time.Time{} // by resourceVersion
		handled atomic.Int64
	)
	w := newWatcher(client, clock.RealClock{}, ns, labels.SelectorFromSet(labels.Set{"app": "none"}), benchService)
	w.door.cost = func(d time.Duration) {
		mu.Lock()
		stamps = append(stamps, d)
		mu.Unlock()
	}
	w.trace = func(obj any, at, start, end time.Time) {
		sl, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		mu.Lock()
		queue = append(queue, start.Sub(at))
		handle = append(handle, end.Sub(start))
		arrived[sl.ResourceVersion] = at
		mu.Unlock()
		handled.Add(1)
	}
	if err := w.start(ctx); err != nil {
		b.Fatal(err)
	}
	// The first list's Add events, which reach the handlers after the cache
	// synced and are no watch deliveries.
	for handled.Load() < benchSlices {
		if ctx.Err() != nil {
			b.Fatal("the first list never reached the handlers")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The trial's address: the last endpoint of the last slice.
	addr := netip.MustParseAddr(sls[benchTrialSliceIdx].Endpoints[benchPerSlice-1].Addresses[0])
	w.begin(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "trial", UID: "trial"}}, addr)
	mu.Lock()
	stamps, queue, handle = stamps[:0], queue[:0], handle[:0]
	clear(arrived)
	mu.Unlock()
	listed := handled.Load() // the first list's events, not watch deliveries

	progress("%d updates from %d writers", benchUpdates, benchWriters)
	type ack struct {
		rv string
		at time.Time
	}
	acks := make(chan ack, benchUpdates)
	var next atomic.Int64
	var wg sync.WaitGroup
	var writeErr atomic.Pointer[error]
	b.ResetTimer()
	for wr := range benchWriters {
		wg.Go(func() {
			// Each writer owns the slices i ≡ wr (mod benchWriters), so no
			// two writers conflict on one object.
			local := map[int]*discoveryv1.EndpointSlice{}
			var owned []int
			for i := wr; i < benchSlices; i += benchWriters {
				if i != benchTrialSliceIdx {
					owned = append(owned, i)
				}
			}
			for n := 0; ; n++ {
				if next.Add(1) > benchUpdates {
					return
				}
				i := owned[n%len(owned)]
				sl := local[i]
				if sl == nil {
					sl = sls[i]
				}
				sl = sl.DeepCopy()
				ep := &sl.Endpoints[0]
				serving := ep.Conditions.Serving == nil || !*ep.Conditions.Serving
				ep.Conditions.Serving = &serving
				got, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, sl, metav1.UpdateOptions{})
				if err != nil {
					writeErr.Store(&err)
					return
				}
				acks <- ack{got.ResourceVersion, time.Now()}
				local[i] = got
			}
		})
	}
	wg.Wait()
	close(acks)
	if p := writeErr.Load(); p != nil {
		b.Fatalf("update: %v", *p)
	}
	deadline := time.Now().Add(time.Minute)
	for handled.Load()-listed < benchUpdates {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d update events handled after a minute", handled.Load()-listed, benchUpdates)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	cancel()

	mu.Lock()
	defer mu.Unlock()
	var deliver []time.Duration
	for a := range acks {
		if at, ok := arrived[a.rv]; ok {
			deliver = append(deliver, at.Sub(a.at))
		}
	}
	if len(deliver) != benchUpdates {
		b.Errorf("%d of %d updates matched to their watch event", len(deliver), benchUpdates)
	}
	for _, m := range []struct {
		name string
		ds   []time.Duration
		unit time.Duration
	}{{"stamp", stamps, time.Nanosecond}, {"queue", queue, time.Nanosecond}, {"handle", handle, time.Nanosecond}, {"deliver", deliver, time.Millisecond}} {
		slices.Sort(m.ds)
		unit := map[time.Duration]string{time.Nanosecond: "ns", time.Millisecond: "ms"}[m.unit]
		for _, q := range []struct {
			name string
			p    float64
		}{{"p50", 0.50}, {"p99", 0.99}, {"max", 1}} {
			b.ReportMetric(float64(quantileOf(m.ds, q.p))/float64(m.unit), m.name+"-"+q.name+"-"+unit)
		}
	}
	b.ReportMetric(float64(len(stamps)), "events")
}

// quantileOf is the nearest-rank p-quantile of sorted ds.
func quantileOf(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(p*float64(len(ds))+0.5) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func benchSlice(ns string, i int) *discoveryv1.EndpointSlice {
	ready := true
	port, proto, name := int32(8080), corev1.ProtocolTCP, ""
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: benchService + "-" + strconv.Itoa(i), Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: benchService, discoveryv1.LabelManagedBy: benchManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for j := range benchPerSlice {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.201.%d.%d", i, j+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready},
		})
	}
	return sl
}
