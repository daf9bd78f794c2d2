package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The ballast: extra Services, each with an EndpointSlice written here and
// an Ingress of the running class, so that kube-proxy's rule set, Skipper's
// route table and Traefik's configuration have production size.
const (
	// ballastNamespace holds every ballast object.
	ballastNamespace = "ballast"
	// ballastManagedBy marks the slices as written by epwindow-local, so the
	// EndpointSlice controller leaves them alone (it manages only slices
	// labelled endpointslice-controller.k8s.io, and a selector-less
	// Service's slices not at all: pkg/controller/endpointslice).
	ballastManagedBy = "epwindow-local"
	// ballastPort is every ballast endpoint's port.
	ballastPort = 8080
	// maxBallastServices bounds --ballast's SERVICES and
	// maxBallastEndpoints its ENDPOINTS (one slice per Service holds them;
	// an EndpointSlice takes at most 1000).
	maxBallastServices  = 20000
	maxBallastEndpoints = 1000
)

// ballastRange is where ballast endpoints' addresses come from: the top of
// the pod range, 10.244.252.0/22. Node i's pods get 10.244.i.0/24 and there
// are at most 250 nodes (--nodes), so no pod ever holds one; the addresses
// sit on no bridge, and the root namespace's unreachable 10.244.0.0/16
// route drops anything sent to them, on this machine. Nothing listens
// there, so nothing is ever routed to a ballast endpoint.
var ballastRange = netip.MustParsePrefix("10.244.252.0/22")

// ballastHosts is how many addresses ballastAddr cycles through: the hosts
// .1 to .254 of each /24 in ballastRange.
const ballastHosts = 4 * 254

// ballastAddr is the k-th ballast address (cycling through ballastHosts:
// Services may share addresses, as kube-proxy and the ingress controllers
// key endpoints by Service).
func ballastAddr(k int) netip.Addr {
	k %= ballastHosts
	b := ballastRange.Addr().As4()
	b[2] += byte(k / 254)
	b[3] = byte(k%254 + 1)
	return netip.AddrFrom4(b)
}

// ballastSpec is --ballast SERVICES[xENDPOINTS].
type ballastSpec struct {
	Services, Endpoints int
}

// parseBallast reads "2000" (5 endpoints each) or "2000x5".
func parseBallast(s string) (ballastSpec, error) {
	if s == "" {
		return ballastSpec{}, nil
	}
	svc, eps, hasEps := strings.Cut(s, "x")
	b := ballastSpec{Endpoints: 5}
	var err error
	if b.Services, err = strconv.Atoi(svc); err != nil {
		return b, fmt.Errorf("--%s %q: want SERVICES or SERVICESxENDPOINTS, e.g. 2000x5", flagBallast, s)
	}
	if hasEps {
		if b.Endpoints, err = strconv.Atoi(eps); err != nil {
			return b, fmt.Errorf("--%s %q: want SERVICES or SERVICESxENDPOINTS, e.g. 2000x5", flagBallast, s)
		}
	}
	if b.Services < 1 || b.Services > maxBallastServices {
		return b, fmt.Errorf("--%s %q: SERVICES must be between 1 and %d", flagBallast, s, maxBallastServices)
	}
	if b.Endpoints < 1 || b.Endpoints > maxBallastEndpoints {
		return b, fmt.Errorf("--%s %q: ENDPOINTS must be between 1 and %d (one EndpointSlice each)", flagBallast, s, maxBallastEndpoints)
	}
	return b, nil
}

// String is the flag's form, "2000x5".
func (b ballastSpec) String() string { return fmt.Sprintf("%dx%d", b.Services, b.Endpoints) }

func ballastName(i int) string { return fmt.Sprintf("ballast-%05d", i) }

// ballastObjects are ballast Service i: a selector-less Service, its one
// EndpointSlice of endpoints ready addresses, and an Ingress of class on
// host <name>.ballast.local.
func ballastObjects(i, endpoints int, class string) (*corev1.Service, *discoveryv1.EndpointSlice, *networkingv1.Ingress) {
	name := ballastName(i)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ballastNamespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(ballastPort), Protocol: corev1.ProtocolTCP}}},
	}
	port, proto, pname := int32(ballastPort), corev1.ProtocolTCP, "http"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ballastNamespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: ballastManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
	for j := range endpoints {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ballastAddr(i*endpoints + j).String()},
			Conditions: endpointConditions(true),
		})
	}
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ballastNamespace},
		Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{{
			Host: name + ".ballast.local",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}},
		}}},
	}
	return svc, slice, ing
}

func endpointConditions(ready bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: new(bool)}
}

// ballastClient is cfg's client without client-side rate limiting: the
// ballast is thousands of creates against a local API server, which its
// own priority and fairness protects.
func ballastClient(cfg *rest.Config) (kubernetes.Interface, error) {
	rc := rest.CopyConfig(cfg)
	rc.QPS, rc.RateLimiter = -1, nil
	return kubernetes.NewForConfig(rc)
}

// createBallast creates the namespace and spec.Services ballast Services
// with their slices and Ingresses, workers at a time; progress is told
// every 500 Services.
func createBallast(ctx context.Context, c kubernetes.Interface, spec ballastSpec, class string, progress func(done int)) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ballastNamespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ballastNamespace, err)
	}
	const workers = 8
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= spec.Services || ctx.Err() != nil {
					return
				}
				if err := createOneBallast(ctx, c, i, spec.Endpoints, class); err != nil {
					errs <- err
					return
				}
				if d := done.Add(1); d%500 == 0 && progress != nil {
					progress(int(d))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs, ctx.Err())
}

func createOneBallast(ctx context.Context, c kubernetes.Interface, i, endpoints int, class string) error {
	svc, slice, ing := ballastObjects(i, endpoints, class)
	exists := func(err error) bool { return err == nil || apierrors.IsAlreadyExists(err) }
	if _, err := c.CoreV1().Services(ballastNamespace).Create(ctx, svc, metav1.CreateOptions{}); !exists(err) {
		return fmt.Errorf("create ballast service %s: %w", svc.Name, err)
	}
	if _, err := c.DiscoveryV1().EndpointSlices(ballastNamespace).Create(ctx, slice, metav1.CreateOptions{}); !exists(err) {
		return fmt.Errorf("create ballast endpointslice %s: %w", slice.Name, err)
	}
	if _, err := c.NetworkingV1().Ingresses(ballastNamespace).Create(ctx, ing, metav1.CreateOptions{}); !exists(err) {
		return fmt.Errorf("create ballast ingress %s: %w", ing.Name, err)
	}
	return nil
}

// waitSkipperRoutes waits until Skipper's table holds at least want routes:
// HEAD /routes answers the count in X-Count (Routing.ServeHTTP in
// routing/routing.go of zalando/skipper), without the table itself.
func waitSkipperRoutes(ctx context.Context, routesURL string, want int) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	last := -1
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, routesURL, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n, err := strconv.Atoi(resp.Header.Get("X-Count")); err == nil {
				last = n
				if n >= want {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("skipper's table holds %d routes, want %d: %w", last, want, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// churnPick is the Service and endpoint the n-th churn change flips:
// Services in turn, and within a Service its endpoints in turn, so every
// change is to a different slice than the one before while the ballast
// has more than one Service.
func churnPick(n int, spec ballastSpec) (svc, ep int) {
	return n % spec.Services, (n / spec.Services) % spec.Endpoints
}

// churn flips one ballast endpoint's readiness rate times a second until
// ctx ends: steady, unrelated endpoint changes for the EndpointSlice
// watchers (kube-proxy, the ingress controllers, measure's watches, which
// must ignore them). Each change is one slice write; a conflict (someone
// else wrote the slice) rereads it and goes on.
func churn(ctx context.Context, c kubernetes.Interface, spec ballastSpec, rate float64, changes *atomic.Int64) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		i, j := churnPick(n, spec)
		name := ballastName(i) + "-0"
		s, err := c.DiscoveryV1().EndpointSlices(ballastNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("churn: get endpointslice %s: %w", name, err)
		}
		if j >= len(s.Endpoints) {
			continue
		}
		ready := s.Endpoints[j].Conditions.Ready == nil || !*s.Endpoints[j].Conditions.Ready
		s.Endpoints[j].Conditions = endpointConditions(ready)
		if _, err := c.DiscoveryV1().EndpointSlices(ballastNamespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if apierrors.IsConflict(err) {
				continue
			}
			return fmt.Errorf("churn: update endpointslice %s: %w", name, err)
		}
		changes.Add(1)
	}
}
