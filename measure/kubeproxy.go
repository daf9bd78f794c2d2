package measure

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
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
// --metrics-bind-address, /metrics) once. An unreachable endpoint is not a
// failure of the run: the returned record says why in Err.
func ReadKubeProxy(ctx context.Context, client *http.Client, url string) results.KubeProxy {
	kp := results.KubeProxy{URL: url}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		kp.Err = err.Error()
		return kp
	}
	resp, err := client.Do(req)
	if err != nil {
		kp.Err = err.Error()
		return kp
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		kp.Err = fmt.Sprintf("GET %s: %s", url, resp.Status)
		return kp
	}
	if err := kubeProxyFigures(io.LimitReader(resp.Body, 16<<20), &kp); err != nil {
		kp.Err = err.Error()
	}
	return kp
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

// kubeProxyLine reads "kube-proxy: 2310 syncs, mean 180ms, p99 ≤ 500ms".
func kubeProxyLine(kp results.KubeProxy) string {
	if kp.Err != "" {
		return "kube-proxy metrics at " + kp.URL + " unreadable: " + kp.Err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kube-proxy: %d syncs, mean %s, %s", kp.Syncs, time.Duration(kp.SyncMeanNS).Round(time.Millisecond),
		p99Bound(kp.SyncP99UpperNS, kp.SyncP99AboveNS))
	if kp.NetworkProgrammings > 0 {
		fmt.Fprintf(&b, "; network programming (creations and updates): %d, mean %s, %s", kp.NetworkProgrammings,
			time.Duration(kp.NetworkProgrammingMeanNS).Round(time.Millisecond), p99Bound(kp.NetworkProgrammingP99UpperNS, kp.NetworkProgrammingP99AboveNS))
	}
	return b.String()
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
