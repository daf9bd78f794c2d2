package measure

import (
	"math/rand/v2"
	"time"
)

// FlagTrialJitter is the flag of Config.TrialJitter.
const FlagTrialJitter = "trial-jitter"

// trialPauses returns the pause before each of n deletions: [0, jitter)
// cut into n equal strata, one pause drawn uniformly inside each stratum,
// the strata in random order (stratified sampling).
//
// Why pause at all: a trial ends a fixed time after the ingress last
// reprogrammed (the quiet period runs from the last traffic, which stops
// when the consumer drops the address), so without a pause every deletion
// lands at the same phase of a periodically reprogramming consumer's
// cycle — Skipper's poll (-source-poll-timeout, 3 s), ingress-nginx's
// rate-limited sync — and the run measures that one phase, not the
// distribution a deletion at an arbitrary moment meets. With --quiet-period
// 2s and Skipper's 3 s poll the next deletion came 0.8 s before a poll in
// most trials. Pauses spread over a whole cycle (jitter ≥ the period, or a
// multiple of it) restore every phase; stratifying them spreads the phases
// evenly, so fewer trials show the distribution than independent draws do.
func trialPauses(n int, jitter time.Duration, rng *rand.Rand) []time.Duration {
	out := make([]time.Duration, n)
	if n <= 0 || jitter <= 0 {
		return out
	}
	width := float64(jitter) / float64(n)
	for i, stratum := range rng.Perm(n) {
		out[i] = time.Duration((float64(stratum) + rng.Float64()) * width)
	}
	return out
}

// pauseRNG draws a run's pauses: a fresh random order each run.
func pauseRNG() *rand.Rand { return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) }
