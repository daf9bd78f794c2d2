package results

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// slidingPeak is the most of the sorted instants at in any window of width w.
func slidingPeak(at []float64, w float64) int {
	best, lo := 0, 0
	for hi := range at {
		for at[hi]-at[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// exceedRate draws n uniform closes over j, trials times (seeded), and
// says how often the busiest 100 ms window held more than c.
func exceedRate(rng *rand.Rand, n, c int, j time.Duration, trials int) float64 {
	over := 0
	at := make([]float64, n)
	for range trials {
		for i := range at {
			at[i] = rng.Float64() * j.Seconds()
		}
		slices.Sort(at)
		if slidingPeak(at, HerdBin.Seconds()) > c {
			over++
		}
	}
	return float64(over) / float64(trials)
}

// The spread SpreadFor gives keeps the busiest 100 ms at or under c in at
// least 95% of simulated herds (false alarm: the advice's J too short),
// and it is not wastefully long: half of it exceeds c in more than 5% of
// herds (power: the bound is near the shortest J that works).
func TestSpreadForSimulated(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 1))
	const trials = 4000
	for _, tc := range []struct{ n, c int }{{10, 2}, {20, 3}, {67, 5}, {200, 10}, {1000, 40}} {
		j, ok := SpreadFor(tc.n, tc.c, HerdBin, SpreadConfidence)
		if !ok || j <= 0 {
			t.Fatalf("SpreadFor(%d, %d) = %s, %v", tc.n, tc.c, j, ok)
		}
		at := exceedRate(rng, tc.n, tc.c, j, trials)
		half := exceedRate(rng, tc.n, tc.c, j/2, trials)
		t.Logf("n=%d c=%d: J=%s exceeds c in %.3f of herds; J/2 in %.3f", tc.n, tc.c, j, at, half)
		// 4000 draws: the rate's standard error at 5% is 0.35%.
		if at > 1-SpreadConfidence {
			t.Errorf("n=%d c=%d: J=%s lets the peak exceed c in %.3f of herds, want ≤ %.2f", tc.n, tc.c, j, at, 1-SpreadConfidence)
		}
		if half <= 1-SpreadConfidence {
			t.Errorf("n=%d c=%d: J/2=%s is enough too (exceeds in %.3f): the bound is loose by 2×", tc.n, tc.c, j/2, half)
		}
	}
}

func TestSpreadForEdges(t *testing.T) {
	if j, ok := SpreadFor(10, 10, HerdBin, SpreadConfidence); !ok || j != 0 {
		t.Errorf("c ≥ n: SpreadFor = %s, %v; want 0 (no spread needed)", j, ok)
	}
	if _, ok := SpreadFor(10, 0, HerdBin, SpreadConfidence); ok {
		t.Errorf("c = 0: SpreadFor found a spread")
	}
	// 100,000 streams at one per 100 ms need more than ten minutes.
	if _, ok := SpreadFor(100000, 1, HerdBin, SpreadConfidence); ok {
		t.Errorf("an impossible spread was found")
	}
}
