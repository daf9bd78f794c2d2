package clusterip

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// Nodes is the local cluster's node count for these tests: one runner on
// each.
const Nodes = 2

// Options is the local cluster for a ground truth at kube-proxy's
// --min-sync-period period.
func Options(period time.Duration) localcluster.Options {
	return localcluster.Options{Nodes: Nodes, IngressPoll: time.Second, ProxyMode: "nftables", ProxyMinSyncPeriod: period}
}

// Config is a measure run with one in-cluster runner per node at 100 req/s
// each (a new connection every 10 ms per runner). The pause before each
// deletion spreads over one kube-proxy period (--trial-jitter, stratified
// over the trials): without it each deletion follows the sync that made the
// last replacement routable by the same fixed steps, and lands at the same
// phase of kube-proxy's cycle every time (seen here at 4 s: 7 of 10 delays
// within 1.35-1.58 s).
func Config(t *testing.T, c *localcluster.Cluster, trials int, period time.Duration) measure.Config {
	t.Helper()
	cfg := e2etest.Config(t, c, c.Client)
	cfg.Trials = trials
	cfg.InClusterLoad, cfg.InClusterRate = Nodes, 100
	cfg.TrialJitter = period
	return cfg
}

// Run runs cfg to the end and returns its records.
func Run(t *testing.T, cfg measure.Config) []*results.Record {
	t.Helper()
	return e2etest.Run(t, cfg, 20*time.Minute).Records
}

// Churn keeps kube-proxy syncing back to back until stop is called: it
// creates and deletes a selector-less ClusterIP Service in a scratch
// namespace every 200 ms, and every Service change queues a sync
// (pkg/proxy/nftables/proxier.go: OnServiceAdd/OnServiceDelete →
// OnServiceUpdate → Sync → syncRunner.Run). Without it, a deletion that
// comes long after kube-proxy's last sync is applied at once, and the
// period would not show.
func Churn(t *testing.T, c kubernetes.Interface) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ns := fmt.Sprintf("epwindow-churn-%d", time.Now().UnixNano()%100000)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "churn"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		for up := false; ; up = !up {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if up {
				_ = c.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{})
			} else {
				_, _ = c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		_ = c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}
}

// slack covers what lies between kube-proxy's sync and the stamps around
// it: our watch and kube-proxy's deliver the slice update ~ms apart
// (DESIGN.md, watch delivery); the nft transaction of a sync takes tens of
// ms on this 2-core machine under load; a runner opens a connection every
// 10 ms, so its last one to the pod may precede the sync by that much; and
// the pod-proxy skew bound of the runner's clock (checked separately,
// ≤ the run's 50 ms).
const slack = 250 * time.Millisecond

// CheckGroundTruth checks cluster_last_routed − slice_not_ready against
// kube-proxy's schedule at --min-sync-period period.
//
// kube-proxy (k8s.io/kubernetes v1.37.2) runs its rule sync through a
// BoundedFrequencyRunner built with minInterval = --min-sync-period
// (pkg/proxy/nftables/proxier.go, NewProxier:
// runner.NewBoundedFrequencyRunner("sync-runner", proxier.syncProxyRules,
// minSyncPeriod, syncPeriod, proxyutil.FullSyncPeriod)); an EndpointSlice
// update only queues a run (OnEndpointSliceUpdate → Sync →
// syncRunner.Run). The runner's Loop (pkg/proxy/runner/
// bounded_frequency_runner.go; pkg/util/async in releases before the
// runner moved) runs fn, then waits minIntervalTimer — minInterval from
// the end of that run — before it takes the next queued request. So an
// update seen at u is applied at max(u, end of the previous sync +
// period) plus one sync's duration: its delay lies in [0, period + sync].
// The endpoint that turned ready=false leaves the rules at that sync (the
// Service has other ready endpoints, so the terminating one is not a
// fallback: KEP-1669, pkg/proxy/topology.go CategorizeEndpoints), and new
// connections stop reaching it. With Churn keeping kube-proxy busy, syncs
// run back to back every period, and with the deletions spread over one
// period (Config) each lands at a uniformly random phase of that cycle: the
// delays spread over [0, period]. So the largest of n delays stays under
// mustExceed (when above 0) with probability (mustExceed/period)^n only.
func CheckGroundTruth(t *testing.T, recs []*results.Record, period, mustExceed time.Duration) []time.Duration {
	t.Helper()
	var delays []time.Duration
	for _, r := range recs {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			continue
		}
		nr, ok := r.Offset(results.StageSliceNotReady)
		if !ok {
			t.Errorf("trial %d: no slice_not_ready", r.Trial)
			continue
		}
		routed := r.Instances(results.StageClusterLastRouted)
		if len(routed) != Nodes {
			t.Errorf("trial %d: %d cluster_last_routed stages, want one per runner (%d); runners %+v", r.Trial, len(routed), Nodes, r.Runners)
			continue
		}
		// One kube-proxy serves every node here (they share one network
		// namespace), so each runner sees the same sync; the latest is the
		// path's end.
		last, _ := r.Offset(results.StageClusterLastRouted)
		d := last - nr
		unc := time.Duration(r.MaxUncertainty(results.StageClusterLastRouted))
		if d < -unc-slack || d > period+slack+unc {
			t.Errorf("trial %d: cluster_last_routed − slice_not_ready = %s, outside [0, %s] ± %s + %s", r.Trial, d, period, unc, slack)
		}
		delays = append(delays, d)
	}
	if mustExceed > 0 && len(delays) > 0 && slices.Max(delays) < mustExceed {
		t.Errorf("delays %v: none reaches %s at --min-sync-period %s; kube-proxy's period does not show", delays, mustExceed, period)
	}
	return delays
}

// URL is the ingress of c, for the CLI.
func URL(t *testing.T, c *localcluster.Cluster) *url.URL {
	t.Helper()
	u, err := url.Parse(c.IngressURL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
