package measure

import (
	"testing"

	"github.com/epwindow/epwindow/results"
)

// The run goes on until --trials trials have a valid window — a trial cut
// at the hold counts, one whose probe record was lost does not — and stops
// at 20% more whatever happens.
func TestTrialBudget(t *testing.T) {
	valid := &results.Record{Valid: true, Stages: []results.Stage{{Name: results.StageLastRequest, OffsetNS: 2e9}}}
	cut := &results.Record{Reasons: []results.Reason{{Code: results.ReasonHoldReached}}, Stages: []results.Stage{{Name: results.StageLastRequest, OffsetNS: 60e9}}}
	lost := &results.Record{Reasons: []results.Reason{{Code: results.ReasonProbeUnreadable}}}
	run := func(want int, trials func(i int) *results.Record) (done int) {
		b := newTrialBudget(want)
		for b.more() {
			done++
			b.add(trials(done))
		}
		return done
	}
	tests := []struct {
		name   string
		want   int
		trials func(i int) *results.Record
		done   int
	}{
		{"all valid: exactly --trials", 59, func(int) *results.Record { return valid }, 59},
		{"censored trials count", 10, func(i int) *results.Record { return map[bool]*results.Record{true: cut, false: valid}[i%2 == 0] }, 10},
		{"two lost: two more", 59, func(i int) *results.Record {
			return map[bool]*results.Record{true: lost, false: valid}[i == 3 || i == 40]
		}, 61},
		{"every trial lost: stops at +20%", 59, func(int) *results.Record { return lost }, 71},
		{"a nil record (no trial) is lost", 5, func(i int) *results.Record { return map[bool]*results.Record{true: nil, false: valid}[i == 1] }, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run(tt.want, tt.trials); got != tt.done {
				t.Errorf("ran %d trials, want %d", got, tt.done)
			}
		})
	}
}
