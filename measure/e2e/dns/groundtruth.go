package dns

import (
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// Interval is the DNS observer's poll interval: the resolution of
// dns_removed.
const Interval = 100 * time.Millisecond

// Slack covers what lies between the EndpointSlice write our watch stamps
// (slice_not_ready, the probe Service's slice) and CoreDNS's answer:
//   - The headless Service has its own slice. The EndpointSlice controller
//     queues every Service that selects a pod when the pod changes
//     (onPodUpdate → queueServicesForPod in
//     pkg/controller/endpointslice/endpointslice_controller.go, both after
//     the same --endpoint-updates-batch-period), so the two writes are
//     separate syncs of the same event, ms apart unless the controller's
//     workers are busy on this 2-core machine.
//   - CoreDNS's kubernetes plugin answers from its informer's cache at
//     query time (plugin/kubernetes/kubernetes.go, Records → findServices
//     over the EndpointSlice indexer; only ready endpoints,
//     plugin/kubernetes/object/endpoint.go): its delivery and ours come
//     from one API server watch, ms apart under load.
//   - One query's round trip over loopback.
//
// The same 250 ms the ClusterIP ground truth allows for watch delivery and
// scheduling here.
const Slack = 250 * time.Millisecond

// Config is a measure run through Skipper with --dns asking CoreDNS
// directly (its address on the pod network) every Interval.
func Config(t *testing.T, c *localcluster.Cluster, trials int) measure.Config {
	t.Helper()
	cfg := e2etest.Config(t, c, c.Client)
	cfg.Trials = trials
	cfg.DNS = true
	cfg.DNSOptions = upstream.DNSOptions{Servers: []string{c.DNSDirect}, Interval: Interval}
	return cfg
}

// DNSSettings is the header's dns observer's settings.
func DNSSettings(t *testing.T, h *results.Header) map[string]string {
	t.Helper()
	for _, o := range h.Observers {
		if o.Name == upstream.KindDNS {
			return o.Settings
		}
	}
	t.Fatalf("header observers %+v: no dns observer", h.Observers)
	return nil
}

// DNSKey is the stage key of CoreDNS at c, asked directly (Config).
func DNSKey(c *localcluster.Cluster) string { return upstream.KindDNS + "/" + c.DNSDirect }

// CheckDelays checks, for every trial, that the replica key's lastPresent
// stage precedes its removed stage and that slice_not_ready→removed lies
// in [lo, hi], and returns those delays. The stages are dns_last_present
// and dns_removed for a DNS server, upstream_last_present and
// upstream_removed for an observed consumer.
func CheckDelays(t *testing.T, recs []*results.Record, lastPresent, removed, key string, lo, hi time.Duration) []time.Duration {
	t.Helper()
	var delays []time.Duration
	for _, r := range recs {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			continue
		}
		rm, ok := r.StageKey(removed, key)
		lp, ok2 := r.StageKey(lastPresent, key)
		nr, ok3 := r.Stage(results.StageSliceNotReady)
		if !ok || !ok2 || !ok3 {
			t.Errorf("trial %d: no %s or %s keyed %s, or no slice_not_ready: %+v", r.Trial, removed, lastPresent, key, r.Stages)
			continue
		}
		if !lp.At.Before(rm.At) {
			t.Errorf("trial %d: %s %s not before %s %s", r.Trial, lastPresent, lp.At, removed, rm.At)
		}
		d := rm.At.Sub(nr.At)
		delays = append(delays, d)
		if d < lo || d > hi {
			t.Errorf("trial %d: slice_not_ready→%s = %s, want within [%s, %s]", r.Trial, removed, d, lo, hi)
		}
	}
	return delays
}
