package dns

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// resolveEvery is HAProxy's `timeout resolve` in this test: how often it
// asks CoreDNS again (src/resolvers.c, resolv_resolution_timeout returns
// resolvers->timeout.resolve; a resolution waits that long after the last
// one). The test's own value, not HAProxy's 1 s default, so that the
// delay's spread can only come from it.
const resolveEvery = 3 * time.Second

// HAProxy from Debian, in front of a headless Service it resolves through
// CoreDNS (server-template + resolvers), is the DNS path's consumer:
// --observer haproxy reads `show servers state` over its stats socket, so
// upstream_removed is when HAProxy stopped sending new traffic to the
// deleted pod, and the load goes through HAProxy.
//
// Ground truth: CoreDNS drops the address at slice_not_ready (no cache,
// checkDNSFollowsTheSlice), HAProxy asks again every resolveEvery
// and then takes the slot's address (RMAINT). So slice_not_ready→
// upstream_removed lies within [−Slack, resolveEvery + Interval + Slack];
// with the deletions spread over one resolveEvery (--trial-jitter,
// stratified) each lands at a uniformly random phase of HAProxy's cycle,
// and the largest of 5 stays within Interval + Slack (what the DNS answer
// alone allows) only with probability (0.35/3)^5 ≈ 2·10^-5. The probe's
// last request came through HAProxy, so it lies within the observer's
// bracket: no later than upstream_removed (+ the skew bound), no earlier
// than the last poll that listed it less one request gap (100 req/s over
// three or four servers: ≤ 40 ms; 100 ms allowed).
//
// HAProxy is the local cluster's (up --haproxy): it resolves a headless
// Service up made, with a name its configuration holds before any run
// (measure's own is named after its run id), over every probe pod of its
// namespace; measure runs there (--namespace) and times the same name
// (--dns-name).
//
// Five trials, each checked on its own, at about 15 s each.
func TestHAProxyFollowsDNS(t *testing.T) {
	if cluster.HAProxyURL == "" || cluster.HAProxySocket == "" || cluster.HAProxyName == "" {
		t.Fatalf("the cluster runs no HAProxy (up --haproxy): %+v", cluster)
	}
	// up's headless Service: <service>.<namespace>.svc.<domain>.
	ns := strings.Split(cluster.HAProxyName, ".")[1]
	frontend, socket, fqdn := cluster.HAProxyURL, cluster.HAProxySocket, cluster.HAProxyName

	cfg := Config(t, cluster, 5)
	cfg.Namespace = ns
	cfg.DNSOptions.Name = fqdn
	u, err := cfg.URL.Parse(frontend)
	if err != nil {
		t.Fatal(err)
	}
	cfg.URL, cfg.Host = u, ""
	cfg.Observer = upstream.KindHAProxy
	cfg.ObserverOptions = upstream.Options{Interval: Interval, URLs: []string{socket}, HAProxyBackend: "probe"}
	cfg.TrialJitter = resolveEvery
	sink := e2etest.Run(t, cfg, 10*time.Minute)

	key := upstream.KindHAProxy + "/" + socket
	delays := CheckDelays(t, sink.Records, results.StageUpstreamLastSeen, results.StageUpstreamRemoved, key, -Slack, resolveEvery+Interval+Slack)
	for _, r := range sink.Records {
		rm, ok := r.StageKey(results.StageUpstreamRemoved, key)
		lp, ok2 := r.StageKey(results.StageUpstreamLastSeen, key)
		last, ok3 := r.Stage(results.StageLastRequest)
		if !ok || !ok2 || !ok3 {
			t.Errorf("trial %d: no last_request (or HAProxy's stages, above)", r.Trial)
			continue
		}
		skew := time.Duration(r.SkewUncertaintyNS)
		if last.At.After(rm.At.Add(skew)) || last.At.Before(lp.At.Add(-100*time.Millisecond-skew)) {
			t.Errorf("trial %d: last_request %s outside HAProxy's bracket [%s − 100ms, %s] (skew ±%s)", r.Trial,
				last.At.Format(time.StampMicro), lp.At.Format(time.StampMicro), rm.At.Format(time.StampMicro), skew)
		}
		if _, ok := r.Stage(results.StageDNSRemoved); !ok {
			t.Errorf("trial %d: no dns_removed", r.Trial)
		}
	}
	t.Logf("slice_not_ready→upstream_removed through HAProxy (timeout resolve %s): %v", resolveEvery, delays)
	if len(delays) > 0 && slices.Max(delays) <= Interval+Slack {
		t.Errorf("largest delay %s: HAProxy's %s resolution cycle does not show", slices.Max(delays), resolveEvery)
	}
}
