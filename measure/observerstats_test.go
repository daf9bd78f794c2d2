package measure

import (
	"context"
	"testing"
	"time"

	"github.com/epwindow/epwindow/measure/upstream"
)

// TestHeaderObserverKeptSpacing: the header's resolution (which sets the
// recommendation's margin) is the spacing the polls kept plus the poll
// time, not the interval asked for, once the tracker backed off.
func TestHeaderObserverKeptSpacing(t *testing.T) {
	st := upstream.PollStats{Interval: time.Second, Polls: 10, Overruns: 10, P99: 1500 * time.Millisecond,
		Max: 1500 * time.Millisecond, Spacing: 3 * time.Second}
	o := headerObserver(namedObserver{}, st, nil)
	if o.Resolution() != 4500*time.Millisecond || o.PollSpacingNS != int64(3*time.Second) {
		t.Errorf("resolution %s, spacing %s; want 4.5s (3s kept + 1.5s poll), 3s", o.Resolution(), time.Duration(o.PollSpacingNS))
	}
}

// namedObserver is an observer that is only named.
type namedObserver struct{}

func (namedObserver) Name() string                               { return "slow" }
func (namedObserver) Resolution() time.Duration                  { return time.Second }
func (namedObserver) Settings(context.Context) map[string]string { return nil }
func (namedObserver) Close() error                               { return nil }
func (namedObserver) Poll(context.Context) (upstream.Snapshot, error) {
	return upstream.Snapshot{}, nil
}
