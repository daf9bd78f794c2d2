package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// Flags of measure's history folder: what a scheduled run (epwindow
// manifests --schedule) writes to its volume. manifests passes them on.
const (
	flagHistoryDir = "history"
	flagKeepRuns   = "keep-runs"
	flagKeepFor    = "keep-for"
)

// historyFlags are measure's flags for writing into a history folder.
func historyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagHistoryDir, Usage: "write the results into this existing folder as run-<start>.jsonl (instead of --out), where epwindow history reads a history; with --keep-runs and --keep-for, older runs there are removed as this one starts", Category: "Output"},
		&cli.IntFlag{Name: flagKeepRuns, Usage: "with --history: keep the newest this many runs there, this one included (0: any number)", Category: "Output"},
		&cli.DurationFlag{Name: flagKeepFor, Usage: "with --history: remove runs there that started longer ago than this (0: any age)", Category: "Output"},
		&cli.IntFlag{Name: flagBaselineTrials, Value: results.DefaultBaselineTrials, Usage: "with --history: the baseline size of the history's drift test (as history's): retention keeps the runs its judgement rests on", Category: "Output"},
		&cli.IntFlag{Name: flagWindowTrials, Value: results.DefaultWindowTrials, Usage: "with --history: the window size of the history's drift test (as history's)", Category: "Output"},
	}
}

// historyDir is measure's --history: the folder the run's results file
// goes into, and what the folder keeps.
type historyDir struct {
	dir  string
	keep results.Retention
	// drift sizes the history's drift test, whose reference and held
	// baseline the retention keeps.
	drift results.DriftOptions
}

// historyConfig reads --history and the retention flags; nil without
// --history. It checks the folder before anything is created in the
// cluster: it must exist, be a folder, and take a new file.
func historyConfig(c *cli.Context) (*historyDir, error) {
	h := &historyDir{
		dir:   c.String(flagHistoryDir),
		keep:  results.Retention{KeepRuns: c.Int(flagKeepRuns), KeepFor: c.Duration(flagKeepFor)},
		drift: results.DriftOptions{BaselineTrials: c.Int(flagBaselineTrials), WindowTrials: c.Int(flagWindowTrials)},
	}
	if err := h.keep.Validate(flagKeepRuns, flagKeepFor); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{flagBaselineTrials, h.drift.BaselineTrials}, {flagWindowTrials, h.drift.WindowTrials}} {
		if f.v < 1 {
			return nil, fmt.Errorf("--%s %d: want a positive number of trials", f.name, f.v)
		}
	}
	if h.dir == "" {
		for _, f := range []string{flagKeepRuns, flagKeepFor, flagBaselineTrials, flagWindowTrials} {
			if c.IsSet(f) {
				return nil, fmt.Errorf("--%s needs --%s (the folder whose runs it keeps)", f, flagHistoryDir)
			}
		}
		return nil, nil
	}
	if c.IsSet(measure.FlagOut) {
		return nil, fmt.Errorf("--%s and --%s: give one (--%s names the file itself)", measure.FlagOut, flagHistoryDir, flagHistoryDir)
	}
	if err := checkWritableDir(h.dir); err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flagHistoryDir, h.dir, err)
	}
	return h, nil
}

// checkWritableDir makes sure dir is a folder a file can be created in, by
// creating one and removing it: permission bits do not tell (root, ACLs,
// a read-only mount).
func checkWritableDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("no such folder (a scheduled run mounts its history volume there)")
		}
		return err
	}
	if !st.IsDir() {
		return errors.New("not a folder")
	}
	f, err := os.CreateTemp(dir, ".epwindow-write-check-*")
	if err != nil {
		return fmt.Errorf("not writable: %w", err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// path is the results file of a run started at start.
func (h *historyDir) path(start time.Time) string {
	return filepath.Join(h.dir, results.RunFileName(start))
}

// prune applies the retention to the folder, never to current (the
// run's own file) nor to the runs the drift test's judgement rests on
// (its reference and a held change's baseline: pruned, a replay would take
// a held regression for the baseline), and returns the names it removed.
func (h *historyDir) prune(current string, now time.Time) ([]string, error) {
	if h.keep == (results.Retention{}) {
		return nil, nil
	}
	needs, err := results.HistoryNeeds(h.dir, h.drift)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flagHistoryDir, h.dir, err)
	}
	removed, err := h.keep.Prune(h.dir, filepath.Base(current), now, needs...)
	if err != nil {
		return removed, fmt.Errorf("--%s %s: %w", flagHistoryDir, h.dir, err)
	}
	return removed, nil
}

// openSink returns the sink of the run's results file and its path: --out
// (default epwindow-<time>.jsonl), created now, so that a name already
// taken is bad input found before the run; or, with --history, the run's
// file in that folder, pruned first so that a full volume gets room, and
// created only as the header comes: `epwindow history` may read the
// folder while the run sets up, and a file without a header is no results
// file to it. Either way a write cut short by a full volume is cut back to
// the last whole record (results.WholeLines), so the file stays valid.
func openSink(c *cli.Context, hist *historyDir, opts results.Options, hold time.Duration) (*fileSink, string, error) {
	now := time.Now()
	path, flag := c.String(measure.FlagOut), measure.FlagOut
	switch {
	case hist != nil:
		path, flag = hist.path(now), flagHistoryDir
	case path == "":
		path = "epwindow-" + now.UTC().Format("20060102-150405") + ".jsonl"
	}
	sink := &fileSink{opts: opts, hold: hold}
	sink.open = func() (*results.Writer, error) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flag, err)
		}
		sink.f = f
		return results.NewWriter(results.WholeLines(f)), nil
	}
	if hist == nil {
		w, err := sink.open()
		if err != nil {
			return nil, "", err
		}
		sink.w = w
		return sink, path, nil
	}
	removed, err := hist.prune(path, now)
	if len(removed) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "epwindow measure: removed %d expired run(s) from %s\n", len(removed), hist.dir)
	}
	if err != nil {
		// Retention is housekeeping: the run goes on.
		fmt.Fprintf(c.App.ErrWriter, "epwindow measure: %v\n", err)
	}
	return sink, path, nil
}

// close closes the results file, if it was created; again is a no-op.
func (s *fileSink) close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// fullVolume explains a run stopped by a full volume (ENOSPC while writing
// its results): what stays, and what to do. written says the file holds
// its header (otherwise it was removed); ok is false for other errors.
func fullVolume(err error, path string, written bool, trials int) (msg string, ok bool) {
	if !errors.Is(err, syscall.ENOSPC) {
		return "", false
	}
	kept := "no results file was written"
	if written {
		kept = fmt.Sprintf("its %d finished trials stay there as a valid partial results file", trials)
	}
	return fmt.Sprintf("the volume of %s is full (no space left on device); cleaned up; %s: free space, or keep fewer runs (--%s, --%s)",
		path, kept, flagKeepRuns, flagKeepFor), true
}
