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

// configz bodies as kube-proxy's /configz serves them (component-base's
// configz handler: the object under "kubeproxy.config.k8s.io"), trimmed of
// fields that do not matter here.
const (
	// 1.31 to 1.35: the internal type (pkg/proxy/apis/config/types.go), no
	// json tags, the sync periods at the top level.
	configzInternal = `{"kubeproxy.config.k8s.io":{"FeatureGates":{},"ClientConnection":{"Kubeconfig":"/var/lib/kube-proxy/kubeconfig.conf","AcceptContentTypes":"","ContentType":"application/vnd.kubernetes.protobuf","QPS":5,"Burst":10},` +
		`"Logging":{"format":"text","flushFrequency":"5s","verbosity":0},"HostnameOverride":"kind-worker","BindAddress":"0.0.0.0","HealthzBindAddress":"0.0.0.0:10256","MetricsBindAddress":"0.0.0.0:10249",` +
		`"Mode":"nftables","IPTables":{"MasqueradeBit":14,"MasqueradeAll":false,"LocalhostNodePorts":true},"IPVS":{"Scheduler":"","ExcludeCIDRs":null,"StrictARP":false,"TCPTimeout":"0s","TCPFinTimeout":"0s","UDPTimeout":"0s"},` +
		`"NFTables":{"MasqueradeBit":14,"MasqueradeAll":false},"DetectLocalMode":"ClusterCIDR","NodePortAddresses":null,"SyncPeriod":"30s","MinSyncPeriod":"1s","ConfigSyncPeriod":"15m0s","PortRange":""}}`
	// Up to 1.30: the internal type with the periods in each mode's section.
	configzInternalSections = `{"kubeproxy.config.k8s.io":{"FeatureGates":{},"BindAddress":"0.0.0.0","MetricsBindAddress":"0.0.0.0:10249","Mode":"ipvs",` +
		`"IPTables":{"MasqueradeBit":14,"MasqueradeAll":false,"LocalhostNodePorts":true,"SyncPeriod":"30s","MinSyncPeriod":"1s"},` +
		`"IPVS":{"SyncPeriod":"45s","MinSyncPeriod":"0s","Scheduler":"rr","ExcludeCIDRs":null,"StrictARP":true},` +
		`"NFTables":{"MasqueradeBit":14,"MasqueradeAll":false,"SyncPeriod":"30s","MinSyncPeriod":"1s"},"ConfigSyncPeriod":"15m0s"}}`
	// A versioned v1alpha1 object (what kubernetes#137426 asks for).
	configzV1alpha1 = `{"kubeproxy.config.k8s.io":{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"iptables",` +
		`"iptables":{"masqueradeBit":14,"minSyncPeriod":"2s","syncPeriod":"1m0s"},"ipvs":{"minSyncPeriod":"0s","syncPeriod":"30s"},"nftables":{"minSyncPeriod":"1s","syncPeriod":"30s"}}}`
	// A versioned v1alpha2 object: the periods at the top level.
	configzV1alpha2 = `{"kubeproxy.config.k8s.io":{"apiVersion":"kubeproxy.config.k8s.io/v1alpha2","kind":"KubeProxyConfiguration","mode":"nftables","syncPeriod":"30s","minSyncPeriod":"1s"}}`
	// 1.36 on: configz.Set refuses the internal type, kube-proxy ignores
	// the error, the handler marshals a nil object.
	configzNull = `{"kubeproxy.config.k8s.io":null}`
)

func TestConfigzPeriods(t *testing.T) {
	for _, c := range []struct {
		name, body, mode string
		wantMode         string
		sync, minSync    time.Duration
		ok               bool
	}{
		{"internal, top level", configzInternal, "nftables", "nftables", 30 * time.Second, time.Second, true},
		{"internal, top level, mode unknown", configzInternal, "", "nftables", 30 * time.Second, time.Second, true},
		{"internal sections, mode from configz", configzInternalSections, "", "ipvs", 45 * time.Second, 0, true},
		{"internal sections, /proxyMode picks", configzInternalSections, "iptables", "ipvs", 30 * time.Second, time.Second, true},
		{"v1alpha1", configzV1alpha1, "", "iptables", time.Minute, 2 * time.Second, true},
		{"v1alpha2", configzV1alpha2, "", "nftables", 30 * time.Second, time.Second, true},
		{"null (1.36 on)", configzNull, "nftables", "", 0, 0, false},
		{"sections, no mode anywhere", `{"kubeproxy.config.k8s.io":{"IPTables":{"SyncPeriod":"30s"}}}`, "", "", 0, 0, false},
		{"another component", `{"componentconfig":{"SyncPeriod":"30s"}}`, "", "", 0, 0, false},
		{"not JSON", "<html><body>hello</body></html>", "", "", 0, 0, false},
		{"bad duration", `{"kubeproxy.config.k8s.io":{"SyncPeriod":"soon"}}`, "", "", 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mode, sync, minSync, ok := configzPeriods([]byte(c.body), c.mode)
			if mode != c.wantMode || sync != c.sync || minSync != c.minSync || ok != c.ok {
				t.Errorf("got %q %s %s %v, want %q %s %s %v", mode, sync, minSync, ok, c.wantMode, c.sync, c.minSync, c.ok)
			}
		})
	}
}

func TestProxyModeOf(t *testing.T) {
	for body, want := range map[string]string{"nftables": "nftables", "iptables\n": "iptables", "ipvs": "ipvs", "": "",
		"<!doctype html><html>": "", "404 page not found": "", strings.Repeat("a", 33): ""} {
		if got := proxyModeOf([]byte(body)); got != want {
			t.Errorf("proxyModeOf(%q) = %q, want %q", body, got, want)
		}
	}
}

// kubeProxyServer serves body at each path (and 404 elsewhere), as
// kube-proxy's metrics server does /metrics, /proxyMode and /configz.
func kubeProxyServer(t *testing.T, paths map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := paths[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The settings come from the metrics URL's server; a missing one leaves its
// field empty and never touches the figures or Err.
func TestReadKubeProxySettings(t *testing.T) {
	figures := results.KubeProxy{Syncs: 100, SyncMeanNS: int64(185 * time.Millisecond), SyncP99UpperNS: int64(512 * time.Millisecond),
		NetworkProgrammings: 10, NetworkProgrammingMeanNS: int64(700 * time.Millisecond), NetworkProgrammingP99UpperNS: int64(2 * time.Second)}
	with := func(u, mode string, sync, minSync time.Duration) results.KubeProxy {
		kp := figures
		kp.URL, kp.Mode, kp.SyncPeriodNS, kp.MinSyncPeriodNS = u, mode, int64(sync), int64(minSync)
		return kp
	}
	for _, c := range []struct {
		name, metricsPath string
		paths             map[string]string
		mode              string
		sync, minSync     time.Duration
		line              string
	}{
		{"both", "/metrics", map[string]string{"/metrics": kubeProxyExposition, "/proxyMode": "nftables", "/configz": configzInternal},
			"nftables", 30 * time.Second, time.Second, "kube-proxy (nftables, sync period 30s, min sync period 1s): 100 syncs"},
		{"configz 404", "/metrics", map[string]string{"/metrics": kubeProxyExposition, "/proxyMode": "iptables"},
			"iptables", 0, 0, "kube-proxy (iptables, sync periods unknown): 100 syncs"},
		{"configz null (1.36 on)", "/metrics", map[string]string{"/metrics": kubeProxyExposition, "/proxyMode": "nftables", "/configz": configzNull},
			"nftables", 0, 0, "kube-proxy (nftables, sync periods unknown): 100 syncs"},
		{"no proxyMode", "/metrics", map[string]string{"/metrics": kubeProxyExposition, "/configz": configzV1alpha1},
			"iptables", time.Minute, 2 * time.Second, "kube-proxy (iptables, sync period 1m0s, min sync period 2s)"},
		{"neither", "/metrics", map[string]string{"/metrics": kubeProxyExposition},
			"", 0, 0, "kube-proxy (mode unknown, sync periods unknown): 100 syncs"},
		// Metrics behind another path (a scrape proxy): the settings are
		// at kube-proxy's root.
		{"non-/metrics path", "/stats/prometheus", map[string]string{"/stats/prometheus": kubeProxyExposition, "/proxyMode": "ipvs", "/configz": configzInternalSections},
			"ipvs", 45 * time.Second, 0, "kube-proxy (ipvs, sync period 45s, min sync period 0s)"},
		// Through the API server's node proxy: the prefix stays.
		{"prefix before /metrics", "/api/v1/nodes/n1:10249/proxy/metrics", map[string]string{"/api/v1/nodes/n1:10249/proxy/metrics": kubeProxyExposition,
			"/api/v1/nodes/n1:10249/proxy/proxyMode": "nftables", "/api/v1/nodes/n1:10249/proxy/configz": configzV1alpha2},
			"nftables", 30 * time.Second, time.Second, "kube-proxy (nftables, sync period 30s, min sync period 1s)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := kubeProxyServer(t, c.paths)
			u := srv.URL + c.metricsPath + "?x=1"
			kp := ReadKubeProxy(context.Background(), srv.Client(), u)
			if want := with(u, c.mode, c.sync, c.minSync); kp != want {
				t.Errorf("got  %+v\nwant %+v", kp, want)
			}
			if line := kubeProxyLine(kp); !strings.HasPrefix(line, c.line) {
				t.Errorf("line %q, want it to start %q", line, c.line)
			}
		})
	}

	// Metrics unreadable, settings served: Err as before, the settings kept.
	srv := kubeProxyServer(t, map[string]string{"/proxyMode": "nftables", "/configz": configzInternal})
	kp := ReadKubeProxy(context.Background(), srv.Client(), srv.URL+"/metrics")
	if kp.Err == "" || kp.Syncs != 0 || kp.Mode != "nftables" || kp.SyncPeriodNS != int64(30*time.Second) {
		t.Errorf("metrics 404: %+v, want an error, no figures, the settings", kp)
	}
	if line := kubeProxyLine(kp); !strings.Contains(line, "unreadable") || !strings.HasSuffix(line, "(nftables, sync period 30s, min sync period 1s)") {
		t.Errorf("line %q", line)
	}
}
