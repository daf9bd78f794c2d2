package traefik

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// Options is a local cluster whose only data plane is Traefik, at
// providersThrottleDuration throttle. No kube-proxy: Traefik sends to pod
// addresses itself.
func Options(throttle time.Duration) localcluster.Options {
	return localcluster.Options{Nodes: 2, Ingress: "traefik", ProxyMode: "none", TraefikThrottle: throttle}
}

// Interval is the observer's poll of Traefik's API.
const Interval = 100 * time.Millisecond

// Config is e2etest's quick run through Traefik's web entry point with the
// Ingress class class (traefik: its Ingress provider; nginx: its
// ingress-nginx provider), the traefik observer reading its API every
// Interval.
func Config(t *testing.T, c *localcluster.Cluster, class string, trials int) measure.Config {
	t.Helper()
	cfg := e2etest.Config(t, c, c.Client)
	u, err := url.Parse(c.TraefikURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.URL, cfg.IngressClass, cfg.Trials = u, class, trials
	cfg.Observer = upstream.KindTraefik
	cfg.ObserverOptions = upstream.Options{Interval: Interval, URLs: []string{c.TraefikAPIURL}}
	return cfg
}

// Run runs cfg to the end and returns its sink.
func Run(t *testing.T, cfg measure.Config) *e2etest.Sink {
	t.Helper()
	return e2etest.Run(t, cfg, 15*time.Minute)
}

// Churn keeps Traefik's Ingress provider handing the router a new
// configuration more often than any throttle tried here, until stop is
// called: every 100 ms it rewrites the host of a class-traefik Ingress in a
// scratch namespace. Its backend is a selector-less Service with one
// EndpointSlice of its own, whose address (in the local pod range, never
// sent to: nothing requests that host) keeps the route in Traefik's
// configuration. Each rewrite is an Ingress event, for which the provider
// builds the configuration and, its hash being new, sends it on
// (Provide in pkg/provider/kubernetes/ingress/kubernetes.go). Without churn
// a change long after the last one passes the throttle at once, and the
// throttle would not show.
func Churn(t *testing.T, c kubernetes.Interface) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ns := fmt.Sprintf("epwindow-churn-%d", time.Now().UnixNano()%100000)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	const name = "churn"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.255.254"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
	}
	class := "traefik"
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{{
			Host: "churn-0.invalid",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
					Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: 80}}}}},
			}},
		}}},
	}
	var err error
	if _, err = c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err == nil {
		if _, err = c.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err == nil {
			ing, err = c.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
		}
	}
	if err != nil {
		cancel()
		t.Fatalf("churn objects in %s: %v", ns, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ing.Spec.Rules[0].Host = fmt.Sprintf("churn-%d.invalid", i)
			if got, err := c.NetworkingV1().Ingresses(ns).Update(ctx, ing, metav1.UpdateOptions{}); err == nil {
				ing = got
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		_ = c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}
}

// slack covers what lies between the forward that carries the change and
// the observer's stamp besides the throttle and the poll: Traefik's
// informer and ours deliver the slice update ms apart (DESIGN.md, watch
// delivery); the provider builds and hashes the whole configuration
// (pkg/provider/kubernetes/ingress/kubernetes.go: Provide's loop takes one
// event at a time, loadConfigurationFromIngresses), and the configuration
// watcher compares, copies, merges and applies it (pkg/server/
// configurationwatcher.go: receiveConfigurations, applyConfigurations, its
// listeners), and an API read may be slow by as much. Under Churn each of
// the two stages can be busy with the previous configuration when the
// update arrives (a new one comes every throttle), so the update may wait
// for one build and one apply before its own: four passes over the whole
// configuration, each tens of ms on this 2-core machine with the churn,
// the probe and the load all running — 828 ms against a 750 ms bound (150 ms
// of slack) was seen once in CI, 78 ms over.
const slack = 300 * time.Millisecond

// CheckGroundTruth checks upstream_removed − slice_not_ready through
// Traefik's Ingress provider at providersThrottleDuration throttle, under
// Churn.
//
// The Kubernetes providers have no throttle of their own (their
// throttleDuration is 0 unless set), so each is wrapped by the aggregator's
// maybeThrottledProvide (pkg/provider/aggregator/aggregator.go): a
// goroutine takes the newest configuration from a ring channel that keeps
// only the last one, forwards it, then sleeps the throttle. A configuration
// made at u therefore goes out at max(u, last forward + throttle). The
// EndpointSlice update that turns the deleted pod's endpoint ready=false,
// terminating=true makes the provider mark its server fenced (loadService
// in pkg/provider/kubernetes/ingress/kubernetes.go), which the observer
// counts as withdrawn; its poll adds up to one Interval. With Churn keeping
// a configuration always waiting, forwards run back to back every
// throttle, and with the deletions spread over one throttle (TrialJitter)
// each update lands at a uniformly random phase of that cycle: the delays
// spread over [0, throttle] + [0, Interval]. So the largest of n delays
// stays under mustExceed (when above 0) with probability about
// (mustExceed/throttle)^n only.
func CheckGroundTruth(t *testing.T, recs []*results.Record, throttle, mustExceed time.Duration) []time.Duration {
	t.Helper()
	var delays []time.Duration
	for _, r := range recs {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			continue
		}
		nr, ok1 := r.Offset(results.StageSliceNotReady)
		rm, ok2 := r.Offset(results.StageUpstreamRemoved)
		if !ok1 || !ok2 {
			t.Errorf("trial %d: slice_not_ready %v, upstream_removed %v", r.Trial, ok1, ok2)
			continue
		}
		d := rm - nr
		if d < -slack || d > throttle+Interval+slack {
			t.Errorf("trial %d: upstream_removed − slice_not_ready = %s, outside [0, %s + %s] ± %s", r.Trial, d, throttle, Interval, slack)
		}
		delays = append(delays, d)
	}
	if mustExceed > 0 && len(delays) > 0 && slices.Max(delays) < mustExceed {
		t.Errorf("delays %v: none reaches %s at a throttle of %s; Traefik's throttle does not show", delays, mustExceed, throttle)
	}
	return delays
}

// Bound is the largest upstream_removed − slice_not_ready CheckGroundTruth
// allows at throttle.
func Bound(throttle time.Duration) time.Duration { return throttle + Interval + slack }

// GroundTruthConfig is Config through the Ingress provider with the
// deletions spread over one throttle period, and a probe that outlives a
// whole period after the quiet period.
func GroundTruthConfig(t *testing.T, c *localcluster.Cluster, trials int, throttle time.Duration) measure.Config {
	cfg := Config(t, c, "traefik", trials)
	cfg.TrialJitter = throttle
	return cfg
}
