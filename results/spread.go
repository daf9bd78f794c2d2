package results

import (
	"math"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// SpreadConfidence is how sure SpreadFor is that a spread herd stays under
// the survivors' capacity.
const SpreadConfidence = 0.95

// spreadStep and maxSpread bound SpreadFor's search: tenths of a second
// (what --stream-drain close-jittered takes comfortably) up to 10 minutes
// (beyond any terminationGracePeriodSeconds worth advising).
const (
	spreadStep = 100 * time.Millisecond
	maxSpread  = 10 * time.Minute
)

// SpreadFor is the shortest spread J (a multiple of 100 ms) over which n
// streams closed at independent uniform instants in [0, J] put at most c
// of them in any window of width w (sliding), with probability at least
// conf. ok is false when no J up to 10 minutes does (c < 1), and J is 0
// when c ≥ n (no spread needed).
//
// It uses a union bound over the closes: a window holding c+1 closes has
// one starting at its first close, and the window from close i holds c
// others with probability at most P(Binomial(n−1, w/J) ≥ c) (less when it
// is cut at J), so P(busiest window > c) ≤ n·P(Binomial(n−1, w/J) ≥ c).
// The bound is conservative: the J it gives is a little longer than the
// shortest that works (a seeded simulation test measures by how much).
func SpreadFor(n, c int, w time.Duration, conf float64) (j time.Duration, ok bool) {
	if c >= n {
		return 0, true
	}
	if c < 1 || n < 2 || w <= 0 {
		return 0, false
	}
	for j = spreadStep; j <= maxSpread; j += spreadStep {
		p := math.Min(1, float64(w)/float64(j))
		b := distuv.Binomial{N: float64(n - 1), P: p}
		// P(X ≥ c) = 1 − P(X ≤ c−1).
		if float64(n)*b.Survival(float64(c-1)) <= 1-conf {
			return j, true
		}
	}
	return 0, false
}
