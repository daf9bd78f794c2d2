package measure

import (
	"context"
	"fmt"
	"time"

	"github.com/epwindow/epwindow/results"
)

// deletions runs the delete mode's trials: each deletes one pod, after a
// pause (--trial-jitter), and waits for steady state before the next.
func (r *runner) deletions(ctx context.Context, sink Sink) error {
	cfg := r.cfg
	pauses := trialPauses(cfg.Trials, cfg.TrialJitter, pauseRNG())
	for i := 1; i <= cfg.Trials; i++ {
		if err := r.pause(ctx, pauses[i-1]); err != nil {
			return err
		}
		if cfg.BeforeDelete != nil {
			if err := cfg.BeforeDelete(ctx, r.ns); err != nil {
				return fmt.Errorf("before trial %d: %w", i, err)
			}
		}
		rec, err := r.trial(ctx, i)
		if err := r.write(sink, rec); err != nil {
			return err
		}
		if err != nil {
			return err
		}
		if i < cfg.Trials {
			if err := r.waitSteady(ctx); err != nil {
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
