// Package cached runs the DNS ground truth of package dns on CoreDNS whose
// cache plugin holds the cluster domain's answers (up --dns-cache-cluster):
// dns_removed must move out by up to the cached copy's lifetime.
package cached

import (
	"slices"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure/e2e/dns"
	"github.com/epwindow/epwindow/results"
)

var cluster *localcluster.Cluster

// ttl is the kubernetes plugin's ttl, and cacheCap the cache plugin's
// cap: the test's own values, above the cache's 5 s floor and below its cap,
// so the cache holds each answer for ttl.
const (
	ttl      = 6 * time.Second
	cacheCap = 20 * time.Second
)

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/dns/cached",
		localcluster.Options{DNS: true, DNSTTL: ttl, DNSCache: cacheCap, DNSCacheCluster: true},
		func(c *localcluster.Cluster) error {
			cluster = c
			return nil
		})
}

// The cache plugin keeps a positive answer for its TTL clamped to [5 s,
// cap] (plugin/cache/cache.go: WriteMsg → computeTTL(msgTTL, minpttl,
// pttl), minpttl = dnsutil.MinimalDefaultTTL = 5 s) and answers from it
// until then, with the time it has left as the TTL; the next query after
// expiry reaches the kubernetes plugin. So an address the slice turned not
// ready is answered until the copy cached before the change expires: the
// delay lies in [−Slack, hold + Interval + Slack] with hold = clamp(ttl).
// Polled every Interval, the copy is refreshed as soon as it expires, and
// with the deletions spread over one hold (--trial-jitter, stratified) each
// lands at a uniformly random age of the copy: the largest of 5 delays
// stays within what package dns allows uncached (Interval + Slack = 350 ms)
// only with probability (0.35/6)^5 < 10^-6.
//
// Five trials: the bound per trial, and a spread that cannot be missed (as
// computed) at about 20 s a trial.
func TestCacheHoldsTheAnswer(t *testing.T) {
	hold := max(ttl, 5*time.Second)
	cfg := dns.Config(t, cluster, 5)
	cfg.TrialJitter = hold
	sink := e2etest.Run(t, cfg, 10*time.Minute)
	s := dns.DNSSettings(t, sink.Meta)
	// The header is written after the first polls, which may all have met
	// a fresh copy: ttl_seen is not required, the longest TTL is.
	if s["ttl"] != hold.String() {
		t.Errorf("header: dns settings %v, want ttl %s (the cache's hold)", s, hold)
	}
	delays := dns.CheckDelays(t, sink.Records, results.StageDNSLastPresent, results.StageDNSRemoved, dns.DNSKey(cluster), -dns.Slack, hold+dns.Interval+dns.Slack)
	t.Logf("slice_not_ready→dns_removed with a %s cache hold: %v", hold, delays)
	if len(delays) > 0 && slices.Max(delays) <= dns.Interval+dns.Slack {
		t.Errorf("largest delay %s: the cache's %s hold does not show", slices.Max(delays), hold)
	}
}
