package measure

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestTrialPauses(t *testing.T) {
	for _, tt := range []struct {
		name   string
		n      int
		jitter time.Duration
	}{
		{"one trial", 1, 3 * time.Second},
		{"twenty trials", 20, 3 * time.Second},
		{"three trials", 3, time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			got := trialPauses(tt.n, tt.jitter, rng)
			if len(got) != tt.n {
				t.Fatalf("%d pauses, want %d", len(got), tt.n)
			}
			// Exactly one pause in each stratum [k·w, (k+1)·w).
			width := float64(tt.jitter) / float64(tt.n)
			seen := make([]bool, tt.n)
			for i, p := range got {
				if p < 0 || p >= tt.jitter {
					t.Fatalf("pause %d = %s outside [0, %s)", i, p, tt.jitter)
				}
				k := min(int(float64(p)/width), tt.n-1)
				if seen[k] {
					t.Errorf("stratum %d holds two pauses: %v", k, got)
				}
				seen[k] = true
			}
			if tt.n > 2 && slices.IsSorted(got) {
				t.Errorf("pauses come in stratum order %v: the order must be random, or phase would drift with the trial number", got)
			}
		})
	}
	t.Run("no jitter", func(t *testing.T) {
		for _, p := range trialPauses(5, 0, rand.New(rand.NewPCG(1, 2))) {
			if p != 0 {
				t.Fatalf("pause %s with --trial-jitter 0", p)
			}
		}
	})
}
