package main

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestParseBallast(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want ballastSpec
		err  string
	}{
		{"", ballastSpec{}, ""},
		{"2000", ballastSpec{2000, 5}, ""},
		{"2000x5", ballastSpec{2000, 5}, ""},
		{"10x1000", ballastSpec{10, 1000}, ""},
		{"0", ballastSpec{}, "SERVICES must be"},
		{"10x0", ballastSpec{}, "ENDPOINTS must be"},
		{"10x1001", ballastSpec{}, "ENDPOINTS must be"},
		{"many", ballastSpec{}, "SERVICESxENDPOINTS"},
		{"10x", ballastSpec{}, "SERVICESxENDPOINTS"},
	} {
		got, err := parseBallast(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "--ballast") {
				t.Errorf("%q: error %v, want one naming --ballast and %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// Ballast addresses stay in 10.244.252.0/22: inside the pod range the
// machine drops (never off the machine), outside every node's pod subnet
// 10.244.i.0/24 (i < 250, the most nodes --nodes allows), never a subnet's
// .0 or .255, and distinct over one cycle.
func TestBallastAddr(t *testing.T) {
	pods := netip.MustParsePrefix("10.244.0.0/16")
	nodes := netip.MustParsePrefix("10.244.0.0/17") // 0..127
	seen := map[netip.Addr]bool{}
	for k := range ballastHosts {
		a := ballastAddr(k)
		b := a.As4()
		if !ballastRange.Contains(a) || !pods.Contains(a) || nodes.Contains(a) || b[2] < 250 || b[3] == 0 || b[3] == 255 {
			t.Fatalf("ballastAddr(%d) = %s: outside the ballast range or inside a node subnet", k, a)
		}
		if seen[a] {
			t.Fatalf("ballastAddr(%d) = %s twice in one cycle", k, a)
		}
		seen[a] = true
	}
	if ballastAddr(ballastHosts) != ballastAddr(0) {
		t.Errorf("the addresses do not cycle")
	}
}

func TestBallastObjects(t *testing.T) {
	svc, slice, ing := ballastObjects(7, 5, "skipper")
	if svc.Name != "ballast-00007" || svc.Namespace != ballastNamespace || svc.Spec.Selector != nil || svc.Spec.Ports[0].Port != 80 {
		t.Errorf("service %+v: want a selector-less ballast-00007 on port 80", svc)
	}
	if slice.Labels[discoveryv1.LabelServiceName] != svc.Name || slice.Labels[discoveryv1.LabelManagedBy] != ballastManagedBy || len(slice.Endpoints) != 5 {
		t.Errorf("slice %+v: want 5 endpoints of %s, not managed by the controller", slice, svc.Name)
	}
	for _, ep := range slice.Endpoints {
		if !*ep.Conditions.Ready || !*ep.Conditions.Serving || *ep.Conditions.Terminating || !ballastRange.Contains(netip.MustParseAddr(ep.Addresses[0])) {
			t.Errorf("endpoint %+v: want ready, serving, in %s", ep, ballastRange)
		}
	}
	if *ing.Spec.IngressClassName != "skipper" || ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name != svc.Name {
		t.Errorf("ingress %+v: want class skipper routing %s", ing.Spec, svc.Name)
	}
}

// The ballast creator writes every object once (the fake clientset keeps
// the API's bookkeeping; the real API server takes them in
// deploy/local/e2e), and churn flips one endpoint per change, Services in
// turn.
func TestCreateBallastAndChurn(t *testing.T) {
	c := fake.NewClientset()
	spec := ballastSpec{Services: 40, Endpoints: 3}
	var reported []int
	if err := createBallast(context.Background(), c, spec, "traefik", func(n int) { reported = append(reported, n) }); err != nil {
		t.Fatal(err)
	}
	slices, err := c.DiscoveryV1().EndpointSlices(ballastNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(slices.Items) != 40 {
		t.Fatalf("%d slices (%v), want 40", len(slices.Items), err)
	}
	ings, _ := c.NetworkingV1().Ingresses(ballastNamespace).List(context.Background(), metav1.ListOptions{})
	svcs, _ := c.CoreV1().Services(ballastNamespace).List(context.Background(), metav1.ListOptions{})
	if len(ings.Items) != 40 || len(svcs.Items) != 40 {
		t.Errorf("%d ingresses, %d services, want 40 each", len(ings.Items), len(svcs.Items))
	}

	if s, e := churnPick(0, spec); s != 0 || e != 0 {
		t.Errorf("churnPick(0) = %d, %d", s, e)
	}
	if s, e := churnPick(41, spec); s != 1 || e != 1 {
		t.Errorf("churnPick(41) = %d, %d, want service 1 endpoint 1", s, e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var changes atomic.Int64
	done := make(chan error, 1)
	go func() { done <- churn(ctx, c, spec, 100, &changes) }()
	deadline := time.Now().Add(20 * time.Second)
	for changes.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := int(changes.Load())
	if n < 3 {
		t.Fatalf("%d churn changes in 20 s at 100/s", n)
	}
	notReady := 0
	slices, _ = c.DiscoveryV1().EndpointSlices(ballastNamespace).List(context.Background(), metav1.ListOptions{})
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if !*ep.Conditions.Ready {
				notReady++
			}
		}
	}
	if notReady != n {
		t.Errorf("%d endpoints not ready after %d changes to distinct Services, want one each", notReady, n)
	}
}
