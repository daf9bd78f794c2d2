package measure

import (
	"math"

	"github.com/epwindow/epwindow/results"
)

// ExtraTrialsShare is how many trials, relative to --trials, a run may add
// to replace trials without a valid window: the default 59 trials are
// exactly what the 95% bound of the 95th percentile needs (1 − 0.95⁵⁹ ≥
// 0.95), so one trial lost to a broken watch or an unreadable probe would
// break the claim; up to 20% more (12 at 59) keep it without letting a
// cluster that spoils most trials run on forever.
const ExtraTrialsShare = 0.20

// trialBudget decides whether a delete-mode run deletes another pod: until
// want trials have a valid window (a trial cut at the hold counts — it is
// in n as a floor), at most limit in all.
type trialBudget struct {
	want, limit int
	done, valid int
}

func newTrialBudget(want int) trialBudget {
	return trialBudget{want: want, limit: want + int(math.Ceil(ExtraTrialsShare*float64(want)-1e-9))}
}

// add counts a finished trial.
func (b *trialBudget) add(rec *results.Record) {
	b.done++
	if windowValid(rec) {
		b.valid++
	}
}

// more reports whether to run another trial.
func (b trialBudget) more() bool { return b.valid < b.want && b.done < b.limit }

// extra is how many trials beyond want have been or are being run.
func (b trialBudget) extra() int { return max(0, b.done-b.want) }

// windowValid reports whether a trial's window counts in the run's n.
func windowValid(rec *results.Record) bool {
	if rec == nil || !rec.PointValid(results.PointWindow) {
		return false
	}
	_, ok := rec.Window()
	return ok
}
