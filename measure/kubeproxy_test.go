package measure

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/results"
)

// kubeProxyExposition is a kube-proxy /metrics body in Prometheus' text
// format, with the histograms' shapes of pkg/proxy/metrics/metrics.go
// (sync duration: exponential buckets from 1 ms; network programming:
// linear then exponential up to 15 minutes), here 100 syncs of which 98
// under 256 ms and 2 under 512 ms.
const kubeProxyExposition = `# HELP kubeproxy_sync_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds
# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.128"} 40
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.256"} 98
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.512"} 100
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="+Inf"} 100
kubeproxy_sync_proxy_rules_duration_seconds_sum 18.5
kubeproxy_sync_proxy_rules_duration_seconds_count 100
# HELP kubeproxy_network_programming_duration_seconds [ALPHA] In Cluster Network Programming Latency in seconds
# TYPE kubeproxy_network_programming_duration_seconds histogram
kubeproxy_network_programming_duration_seconds_bucket{le="0.5"} 3
kubeproxy_network_programming_duration_seconds_bucket{le="1"} 9
kubeproxy_network_programming_duration_seconds_bucket{le="2"} 10
kubeproxy_network_programming_duration_seconds_bucket{le="+Inf"} 10
kubeproxy_network_programming_duration_seconds_sum 7
kubeproxy_network_programming_duration_seconds_count 10
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7e+09
`

func TestReadKubeProxy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, kubeProxyExposition)
	}))
	defer srv.Close()
	kp := ReadKubeProxy(context.Background(), srv.Client(), srv.URL+"/metrics")
	want := results.KubeProxy{URL: srv.URL + "/metrics", Syncs: 100, SyncMeanNS: int64(185 * time.Millisecond), SyncP99UpperNS: int64(512 * time.Millisecond),
		NetworkProgrammings: 10, NetworkProgrammingMeanNS: int64(700 * time.Millisecond), NetworkProgrammingP99UpperNS: int64(2 * time.Second)}
	if kp != want {
		t.Errorf("got  %+v\nwant %+v", kp, want)
	}
	if line := kubeProxyLine(kp); !strings.Contains(line, "100 syncs, mean 185ms, p99 ≤ 512ms") || !strings.Contains(line, "p99 ≤ 2s") {
		t.Errorf("line %q", line)
	}

	// Unreachable (a closed loopback port), not kube-proxy's endpoint:
	// recorded, never fatal.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + ln.Addr().String() + "/metrics"
	ln.Close()
	for _, u := range []string{closed, srv.URL + "/other"} {
		if kp := ReadKubeProxy(context.Background(), srv.Client(), u); kp.Err == "" || kp.Syncs != 0 {
			t.Errorf("%s: %+v, want an error and no figures", u, kp)
		}
	}
	var empty results.KubeProxy
	if err := kubeProxyFigures(strings.NewReader("# TYPE up gauge\nup 1\n"), &empty); err == nil || !strings.Contains(err.Error(), metricSyncDuration) {
		t.Errorf("metrics without kube-proxy's histogram: %v", err)
	}
}

// A p99 beyond the last finite bucket is not "≤ 0s": the line says it is
// above that bucket, and the header keeps the bucket.
func TestKubeProxyP99InInf(t *testing.T) {
	const body = `# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.256"} 90
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.512"} 95
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="+Inf"} 100
kubeproxy_sync_proxy_rules_duration_seconds_sum 80
kubeproxy_sync_proxy_rules_duration_seconds_count 100
# TYPE kubeproxy_network_programming_duration_seconds histogram
kubeproxy_network_programming_duration_seconds_bucket{le="1"} 1
kubeproxy_network_programming_duration_seconds_bucket{le="2"} 2
kubeproxy_network_programming_duration_seconds_bucket{le="+Inf"} 10
kubeproxy_network_programming_duration_seconds_sum 70
kubeproxy_network_programming_duration_seconds_count 10
`
	var kp results.KubeProxy
	if err := kubeProxyFigures(strings.NewReader(body), &kp); err != nil {
		t.Fatal(err)
	}
	if kp.SyncP99UpperNS != 0 || kp.SyncP99AboveNS != int64(512*time.Millisecond) || kp.NetworkProgrammingP99AboveNS != int64(2*time.Second) {
		t.Errorf("figures %+v: want no upper bound, above 512ms and 2s", kp)
	}
	line := kubeProxyLine(kp)
	if strings.Contains(line, "≤ 0s") || !strings.Contains(line, "p99 > 512ms") || !strings.Contains(line, "p99 > 2s") {
		t.Errorf("line %q: want p99 > 512ms and p99 > 2s", line)
	}
}
