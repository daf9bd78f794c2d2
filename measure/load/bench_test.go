package load

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// BenchmarkGenerator drives the generator against a loopback server that
// answers like the probe, at a rate far above what one request costs, and
// reports the achieved rate and the CPU-independent figures the bench script
// compares with vegeta (latency, schedule lag). b.N is the number of requests.
func BenchmarkGenerator(b *testing.B) {
	for _, keepAlive := range []bool{true, false} {
		name := "keepalive"
		if !keepAlive {
			name = "newconn"
		}
		b.Run(name, func(b *testing.B) {
			srv := httptest.NewServer(probeHandler([]string{"pod-a", "pod-b"}, 0))
			defer srv.Close()
			const rate = 2000
			g, err := New(Config{URL: srv.URL + "/", Rate: rate, KeepAlive: keepAlive, MaxConns: 2000}, clock.RealClock{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ResetTimer()
			go func() { done <- g.Run(ctx) }()
			// Stop once b.N requests were scheduled (Totals would scan the
			// histograms on every poll).
			for g.hits.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			t := g.Totals()
			if t.Failed != 0 {
				b.Fatalf("%d requests failed: %v", t.Failed, g.Failures(time.Time{}, time.Time{}))
			}
			b.ReportMetric(t.Rate, "req/s")
			b.ReportMetric(float64(t.LatencyP50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(t.LatencyP99.Microseconds()), "p99-µs")
			b.ReportMetric(float64(t.LagP99.Microseconds()), "lag-p99-µs")
			b.ReportMetric(float64(t.Dropped), "dropped")
		})
	}
}
