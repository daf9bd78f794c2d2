package measure

import (
	"context"
	"fmt"
	"time"

	"github.com/epwindow/epwindow/results"
)

// deletions runs the delete mode's trials: each deletes one pod, after a
// pause (--trial-jitter), and waits for steady state before the next. It
// runs until cfg.Trials trials have a valid window, up to ExtraTrialsShare
// more (see trialBudget), and says so in the progress line.
func (r *runner) deletions(ctx context.Context, sink Sink) error {
	cfg := r.cfg
	budget := newTrialBudget(cfg.Trials)
	rng := pauseRNG()
	pauses := trialPauses(cfg.Trials, cfg.TrialJitter, rng)
	for i := 1; budget.more(); i++ {
		pause := time.Duration(0)
		switch {
		case i <= len(pauses):
			pause = pauses[i-1]
		case cfg.TrialJitter > 0:
			// A replacement trial: the strata are spent, any phase does.
			pause = time.Duration(rng.Int64N(int64(cfg.TrialJitter)))
		}
		if i > cfg.Trials {
			r.report(Progress{Phase: "steady", Trials: cfg.Trials, Extra: i - cfg.Trials, MaxExtra: budget.limit - cfg.Trials,
				Message: fmt.Sprintf("%d/%d valid", budget.valid, cfg.Trials)})
		}
		if err := r.pause(ctx, pause); err != nil {
			return err
		}
		if cfg.BeforeDelete != nil {
			if err := cfg.BeforeDelete(ctx, r.ns); err != nil {
				return fmt.Errorf("before trial %d: %w", i, err)
			}
		}
		trial, steady := r.trial, r.waitSteady
		if r.target != nil {
			trial, steady = r.targetTrial, r.waitTargetSteady
		}
		rec, err := trial(ctx, i)
		if err := r.write(sink, rec); err != nil {
			return err
		}
		if err != nil {
			return err
		}
		budget.add(rec)
		if budget.more() {
			if err := steady(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// pause waits d before the next deletion (--trial-jitter).
func (r *runner) pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	r.report(Progress{Phase: "steady", Message: fmt.Sprintf("pausing %s before the deletion (--%s)", d.Round(time.Millisecond), FlagTrialJitter)})
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-r.cfg.Clock.After(d):
		return nil
	}
}

// write hands a finished trial to the sink.
func (r *runner) write(sink Sink, rec *results.Record) error {
	if rec == nil {
		return nil
	}
	if err := sink.Trial(rec); err != nil {
		return fmt.Errorf("write trial %d: %w", rec.Trial, err)
	}
	if w, ok := rec.Window(); ok && rec.Valid {
		r.pmu.Lock()
		r.last.LastWindow = w
		r.pmu.Unlock()
	}
	return nil
}
