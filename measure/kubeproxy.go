package measure

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/epwindow/epwindow/results"
)

// kube-proxy's histograms (pkg/proxy/metrics/metrics.go in
// k8s.io/kubernetes): the duration of each rule sync, and ClusterLoader2's
// network-programming latency.
const (
	metricSyncDuration       = "kubeproxy_sync_proxy_rules_duration_seconds"
	metricNetworkProgramming = "kubeproxy_network_programming_duration_seconds"
)

// ReadKubeProxy reads kube-proxy's metrics endpoint (its
// --metrics-bind-address, /metrics) once, and beside it the settings that
// shape the window: /proxyMode and /configz on the same server (see
// kubeProxySettings). An unreachable endpoint is not a failure of the run:
// the returned record says why in Err. Err is about the metrics only: a
// kube-proxy that does not serve its settings leaves Mode and the sync
// periods empty, and kubeProxyLine says they are unknown.
func ReadKubeProxy(ctx context.Context, client *http.Client, metricsURL string) results.KubeProxy {
	kp := results.KubeProxy{URL: metricsURL}
	body, reached, err := kubeProxyGet(ctx, client, metricsURL, 16<<20)
	if err != nil {
		kp.Err = err.Error()
	} else if err := kubeProxyFigures(bytes.NewReader(body), &kp); err != nil {
		kp.Err = err.Error()
	}
	if !reached {
		// Nothing answered at that host and port: asking it for the
		// settings would only wait out two more timeouts.
		return kp
	}
	kubeProxySettings(ctx, client, metricsURL, &kp)
	return kp
}

// kubeProxyGet GETs u, with its own timeout, and returns the body of a 200
// (at most limit bytes). reached says whether an HTTP server answered at
// all, whatever its status.
func kubeProxyGet(ctx context.Context, client *http.Client, u string, limit int64) (body []byte, reached bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, true, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, true, fmt.Errorf("read %s: %w", u, err)
	}
	return body, true, nil
}

// kube-proxy's metrics server serves, beside /metrics, its proxy mode and
// its configuration (serveMetrics in cmd/kube-proxy/app/server.go,
// k8s.io/kubernetes): /proxyMode writes s.Config.Mode as plain text, no
// newline ("iptables", "ipvs", "nftables"); /configz is component-base's
// handler (staging/src/k8s.io/component-base/configz/configz.go), a JSON
// object keyed by the name registered, kubeproxyconfig.GroupName.
const (
	pathProxyMode = "/proxyMode"
	pathConfigz   = "/configz"
	configzKey    = "kubeproxy.config.k8s.io"
)

// kubeProxySettings fills kp's Mode and sync periods from the server behind
// metricsURL. Either endpoint may be missing (a kube-proxy of another
// version, a proxy in front that forwards /metrics only) or say nothing
// (see configzPeriods): the fields then stay empty, and the metrics
// figures and Err are untouched.
func kubeProxySettings(ctx context.Context, client *http.Client, metricsURL string, kp *results.KubeProxy) {
	u, err := url.Parse(metricsURL)
	if err != nil {
		return
	}
	if body, _, err := kubeProxyGet(ctx, client, siblingURL(u, pathProxyMode), 256); err == nil {
		kp.Mode = proxyModeOf(body)
	}
	body, _, err := kubeProxyGet(ctx, client, siblingURL(u, pathConfigz), 4<<20)
	if err != nil {
		return
	}
	mode, sync, minSync, ok := configzPeriods(body, kp.Mode)
	if kp.Mode == "" {
		// The same value /proxyMode serves: server.go passes
		// s.Config.Mode to both.
		kp.Mode = mode
	}
	if ok {
		kp.SyncPeriodNS, kp.MinSyncPeriodNS = int64(sync), int64(minSync)
	}
}

// siblingURL is the URL of path p on the server behind the metrics URL u:
// a path ending in /metrics keeps what comes before it (a prefix such as
// the API server's /api/v1/nodes/NODE:10249/proxy), any other path is
// replaced, as kube-proxy serves both at its root.
func siblingURL(u *url.URL, p string) string {
	s := *u
	s.RawQuery, s.Fragment, s.RawPath = "", "", ""
	if prefix, ok := strings.CutSuffix(u.Path, "/metrics"); ok {
		s.Path = prefix + p
	} else {
		s.Path = p
	}
	return s.String()
}

// proxyModeOf is /proxyMode's body when it reads as a mode name: a server
// that answers 200 to every path (a catch-all in front of kube-proxy) must
// not become a setting.
func proxyModeOf(body []byte) string {
	m := strings.TrimSpace(string(body))
	if m == "" || len(m) > 32 || strings.TrimFunc(m, func(r rune) bool { return r >= 'a' && r <= 'z' }) != "" {
		return ""
	}
	return m
}

// configzProxy is what configzPeriods reads of kube-proxy's configuration.
// The JSON differs by version, and encoding/json matches names without
// regard to case, which covers the two spellings:
//   - The internal type (pkg/proxy/apis/config/types.go) is what
//     newProxyServer passes to configz.Set. It has no json tags, so it is
//     served with Go's names: "Mode", and metav1.Duration strings ("30s")
//     in "SyncPeriod" and "MinSyncPeriod" at the top level (since the
//     internal type took v1alpha2's shape, 1.31) or, before, in "IPTables",
//     "IPVS" and "NFTables".
//   - A versioned type (issue kubernetes#137426 asks for one) would use
//     tags: "mode", and "syncPeriod"/"minSyncPeriod" at the top level
//     (v1alpha2) or in "iptables", "ipvs", "nftables" (v1alpha1).
type configzProxy struct {
	Mode string `json:"mode"`
	configzSync
	IPTables configzSync `json:"iptables"`
	IPVS     configzSync `json:"ipvs"`
	NFTables configzSync `json:"nftables"`
}

// configzSync is a pair of sync periods as metav1.Duration serializes them.
type configzSync struct {
	SyncPeriod    *string `json:"syncPeriod"`
	MinSyncPeriod *string `json:"minSyncPeriod"`
}

// configzPeriods reads the proxy mode and the sync periods from a /configz
// body; mode, when known (from /proxyMode), picks the per-mode section of
// older layouts. ok is false when the body holds no sync period. That is
// what a 1.37 kube-proxy serves: since kubernetes#136044, configz.Set
// (component-base v0.37.2, as in go.mod) refuses an object without an
// external apiVersion and kind, and newProxyServer ignores Set's error
// while passing its internal config, whose kind the conversion to the
// internal version clears (setTargetKind in apimachinery's
// pkg/runtime/scheme.go); the body is then {"kubeproxy.config.k8s.io":null}.
func configzPeriods(body []byte, mode string) (cfgMode string, sync, minSync time.Duration, ok bool) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(body, &all); err != nil {
		return "", 0, 0, false
	}
	var c *configzProxy
	if err := json.Unmarshal(all[configzKey], &c); err != nil || c == nil {
		return "", 0, 0, false
	}
	cfgMode = proxyModeOf([]byte(c.Mode))
	if mode == "" {
		mode = cfgMode
	}
	s := c.configzSync
	if s.SyncPeriod == nil {
		switch mode {
		case "iptables":
			s = c.IPTables
		case "ipvs":
			s = c.IPVS
		case "nftables":
			s = c.NFTables
		}
	}
	if s.SyncPeriod == nil {
		return cfgMode, 0, 0, false
	}
	sync, err := time.ParseDuration(*s.SyncPeriod)
	if err != nil || sync <= 0 {
		return cfgMode, 0, 0, false
	}
	if s.MinSyncPeriod != nil {
		if minSync, err = time.ParseDuration(*s.MinSyncPeriod); err != nil || minSync < 0 {
			minSync = 0
		}
	}
	return cfgMode, sync, minSync, true
}

// kubeProxyFigures fills kp from a Prometheus text exposition.
func kubeProxyFigures(r io.Reader, kp *results.KubeProxy) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("parse kube-proxy metrics: %w", err)
	}
	h, ok := histogram(fams, metricSyncDuration)
	if !ok {
		return fmt.Errorf("kube-proxy metrics have no %s: is this kube-proxy's metrics endpoint?", metricSyncDuration)
	}
	kp.Syncs, kp.SyncMeanNS, kp.SyncP99UpperNS, kp.SyncP99AboveNS = histogramFigures(h)
	if h, ok := histogram(fams, metricNetworkProgramming); ok {
		kp.NetworkProgrammings, kp.NetworkProgrammingMeanNS, kp.NetworkProgrammingP99UpperNS, kp.NetworkProgrammingP99AboveNS = histogramFigures(h)
	}
	return nil
}

// histogram is the family's histogram, summed over its label sets (one in
// kube-proxy's single-stack modes; nftables and iptables report each
// family separately in dual stack).
func histogram(fams map[string]*dto.MetricFamily, name string) (*dto.Histogram, bool) {
	f, ok := fams[name]
	if !ok || f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) == 0 {
		return nil, false
	}
	sum := &dto.Histogram{}
	var count uint64
	var total float64
	byBound := map[float64]uint64{}
	var bounds []float64
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		count += h.GetSampleCount()
		total += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			if _, ok := byBound[b.GetUpperBound()]; !ok {
				bounds = append(bounds, b.GetUpperBound())
			}
			byBound[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	sum.SampleCount, sum.SampleSum = &count, &total
	for _, ub := range bounds {
		c := byBound[ub]
		sum.Bucket = append(sum.Bucket, &dto.Bucket{UpperBound: &ub, CumulativeCount: &c})
	}
	return sum, true
}

// histogramFigures are a histogram's count, mean, and the upper bound of
// the first bucket whose cumulative count reaches 99% of the count (the
// p99 is at or below it). When that bucket is +Inf, p99UpperNS is 0 and
// p99AboveNS the largest finite bound, which the p99 exceeds (0 when the
// histogram has no finite bucket).
func histogramFigures(h *dto.Histogram) (count int64, meanNS, p99UpperNS, p99AboveNS int64) {
	n := h.GetSampleCount()
	if n == 0 {
		return 0, 0, 0, 0
	}
	meanNS = int64(h.GetSampleSum() / float64(n) * 1e9)
	need := uint64(math.Ceil(0.99 * float64(n)))
	best, finite := math.Inf(1), math.Inf(-1)
	for _, b := range h.GetBucket() {
		ub := b.GetUpperBound()
		if b.GetCumulativeCount() >= need && ub < best {
			best = ub
		}
		if !math.IsInf(ub, 1) && ub > finite {
			finite = ub
		}
	}
	switch {
	case !math.IsInf(best, 1):
		p99UpperNS = int64(best * 1e9)
	case !math.IsInf(finite, -1):
		p99AboveNS = int64(finite * 1e9)
	}
	return int64(n), meanNS, p99UpperNS, p99AboveNS
}

// kubeProxyLine reads "kube-proxy (nftables, sync period 30s, min sync
// period 1s): 2310 syncs, mean 180ms, p99 ≤ 500ms", and says which
// settings kube-proxy did not serve.
func kubeProxyLine(kp results.KubeProxy) string {
	settings := kubeProxySettingsText(kp)
	if kp.Err != "" {
		return "kube-proxy metrics at " + kp.URL + " unreadable: " + kp.Err + " (" + settings + ")"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kube-proxy (%s): %d syncs, mean %s, %s", settings, kp.Syncs, time.Duration(kp.SyncMeanNS).Round(time.Millisecond),
		p99Bound(kp.SyncP99UpperNS, kp.SyncP99AboveNS))
	if kp.NetworkProgrammings > 0 {
		fmt.Fprintf(&b, "; network programming (creations and updates): %d, mean %s, %s", kp.NetworkProgrammings,
			time.Duration(kp.NetworkProgrammingMeanNS).Round(time.Millisecond), p99Bound(kp.NetworkProgrammingP99UpperNS, kp.NetworkProgrammingP99AboveNS))
	}
	return b.String()
}

// kubeProxySettingsText reads "nftables, sync period 30s, min sync period
// 1s", or "mode unknown, sync periods unknown" when kube-proxy served
// neither (no /proxyMode, a /configz without them).
func kubeProxySettingsText(kp results.KubeProxy) string {
	mode := kp.Mode
	if mode == "" {
		mode = "mode unknown"
	}
	if kp.SyncPeriodNS == 0 {
		return mode + ", sync periods unknown"
	}
	return fmt.Sprintf("%s, sync period %s, min sync period %s", mode, time.Duration(kp.SyncPeriodNS), time.Duration(kp.MinSyncPeriodNS))
}

// p99Bound says what a histogram's buckets tell of its p99: "p99 ≤ 512ms",
// "p99 > 16.384s" when it lies in the +Inf bucket, "p99 unknown" when the
// histogram has no finite bucket.
func p99Bound(upperNS, aboveNS int64) string {
	switch {
	case upperNS > 0:
		return "p99 ≤ " + time.Duration(upperNS).String()
	case aboveNS > 0:
		return "p99 > " + time.Duration(aboveNS).String()
	}
	return "p99 unknown"
}
