package results

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSummaryClose: percentiles, deltas and the recommendation's
// bootstrap for a run of n trials — what report and measure pay at the end.
func BenchmarkSummaryClose(b *testing.B) {
	for _, n := range []int{20, 200} {
		trials := synthTrials(synthSpec{seed: 1, trials: n, poll: 3 * time.Second})
		b.Run(fmt.Sprint("trials=", n), func(b *testing.B) {
			for b.Loop() {
				s := NewSummary(nil, Options{})
				for i := range trials {
					s.Add(&trials[i])
				}
				s.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/summary")
		})
	}
}

// BenchmarkCompare: every metric's p50/p95/p99 with CompareResamples
// bootstrap resamples of both runs.
func BenchmarkCompare(b *testing.B) {
	for _, n := range []int{20, 200} {
		base := synthSummary(synthSpec{seed: 1, trials: n, poll: time.Second})
		next := synthSummary(synthSpec{seed: 2, trials: n, poll: 3 * time.Second})
		b.Run(fmt.Sprint("trials=", n), func(b *testing.B) {
			for b.Loop() {
				Compare(base, next, CompareOptions{})
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/compare")
		})
	}
}
