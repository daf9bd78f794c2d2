package results

import (
	"testing"
	"time"
)

// TestObserverPart: a header with poll figures says the interval and the
// resolution it really had; an older one (interval only) reads as before.
func TestObserverPart(t *testing.T) {
	for _, tc := range []struct {
		o    Observer
		want string
	}{
		{Observer{Name: "skipper", ResolutionNS: int64(time.Second)}, "observer skipper every 1s"},
		{Observer{Name: "skipper", ResolutionNS: int64(1200 * time.Millisecond), IntervalNS: int64(time.Second), PollP99NS: int64(200 * time.Millisecond)},
			"observer skipper every 1s, resolves 1.2s (poll p99 200ms)"},
		{Observer{Name: "traefik", ResolutionNS: int64(2500 * time.Millisecond), IntervalNS: int64(time.Second), PollP99NS: int64(1500 * time.Millisecond), Overruns: 3},
			"observer traefik every 1s, resolves 2.5s (poll p99 1.5s, 3 over the interval)"},
		// Polls kept further apart than the interval (after overruns) say so:
		// the resolution is that spacing plus the poll time.
		{Observer{Name: "traefik", ResolutionNS: int64(4500 * time.Millisecond), IntervalNS: int64(time.Second), PollP99NS: int64(1500 * time.Millisecond),
			PollSpacingNS: int64(3 * time.Second), Overruns: 3},
			"observer traefik every 1s, resolves 4.5s (poll p99 1.5s, 3 over the interval, polls kept 3s apart)"},
	} {
		if got := observerPart(tc.o); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
