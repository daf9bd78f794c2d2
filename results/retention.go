package results

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// A history folder holds one results file per scheduled run, named by the
// instant the run started: run-20261205T201941Z.jsonl. The names sort as
// the runs started, and retention reads a run's age from its name, not
// from the file's modification time (a copy or a restore changes that).
const (
	runFilePrefix = "run-"
	runFileSuffix = ".jsonl"
	runFileLayout = "20060102T150405Z"
)

// RunFileName is the name of the results file of a run started at start
// in a history folder, at second resolution in UTC.
func RunFileName(start time.Time) string {
	return runFilePrefix + start.UTC().Format(runFileLayout) + runFileSuffix
}

// RunFileStart is the start of the run a RunFileName names; ok is false
// for any other name, which retention never touches.
func RunFileStart(name string) (start time.Time, ok bool) {
	s, found := strings.CutPrefix(name, runFilePrefix)
	if !found {
		return time.Time{}, false
	}
	s, found = strings.CutSuffix(s, runFileSuffix)
	if !found {
		return time.Time{}, false
	}
	t, err := time.Parse(runFileLayout, s)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// Retention says which runs a history folder keeps: the newest KeepRuns
// (0: any number) of those that started within KeepFor (0: any age).
type Retention struct {
	KeepRuns int
	KeepFor  time.Duration
}

// Validate names the flag of a value out of range.
func (r Retention) Validate(flagRuns, flagFor string) error {
	if r.KeepRuns < 0 {
		return fmt.Errorf("--%s (%d) must not be negative (0 keeps any number)", flagRuns, r.KeepRuns)
	}
	if r.KeepFor < 0 {
		return fmt.Errorf("--%s (%s) must not be negative (0 keeps any age)", flagFor, r.KeepFor)
	}
	return nil
}

// Expired returns the run files among names that r drops at now, oldest
// first. current, the file of the run in progress, is never among them but
// counts as one of the KeepRuns: a scheduled run prunes as it starts, so
// that a full volume gets room before it writes. Names that are not run
// files (RunFileStart) are neither counted nor dropped.
func (r Retention) Expired(names []string, current string, now time.Time) []string {
	type run struct {
		name  string
		start time.Time
	}
	var runs []run
	for _, n := range names {
		if n == current {
			continue
		}
		if t, ok := RunFileStart(n); ok {
			runs = append(runs, run{n, t})
		}
	}
	// Newest first; equal starts by name, so the choice is stable.
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].start.Equal(runs[j].start) {
			return runs[i].start.After(runs[j].start)
		}
		return runs[i].name > runs[j].name
	})
	keep := len(runs)
	if r.KeepRuns > 0 {
		// current is one of them, whether or not it is in names yet.
		keep = min(keep, r.KeepRuns-1)
	}
	var out []string
	for i, rn := range runs {
		if i >= keep || (r.KeepFor > 0 && now.Sub(rn.start) > r.KeepFor) {
			out = append(out, rn.name)
		}
	}
	sort.Strings(out)
	return out
}

// Prune removes from dir the run files r drops at now (Expired), never
// current (a base name in dir) nor a name in keep (the runs a judgement
// rests on: HistoryNeeds), and returns the names it removed. It stops at
// the first file it cannot remove.
func (r Retention) Prune(dir, current string, now time.Time, keep ...string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read history folder: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	var removed []string
	for _, n := range r.Expired(names, current, now) {
		if slices.Contains(keep, n) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("remove expired run: %w", err)
		}
		removed = append(removed, n)
	}
	return removed, nil
}

// HistoryNeeds reads the run files of a history folder (RunFileStart
// names; a file that does not decode, or has no header yet, is no run and
// is passed over) and returns the runs the drift test at o rests on
// beyond the newest ones (Drift.Needs): its reference, and a held change's
// baseline. Retention keeps them, so that pruning old runs never turns a
// held regression into the baseline, whatever --keep-runs and --keep-for
// say.
func HistoryNeeds(dir string, o DriftOptions) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read history folder: %w", err)
	}
	var runs []HistoryRun
	for _, e := range entries {
		if _, ok := RunFileStart(e.Name()); !ok || !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		file, err := Decode(f)
		f.Close()
		if err != nil || file.Header == nil {
			continue
		}
		// A scheduled run does this beside its own trials, within its
		// memory limit: keep of each trial only what the drift test reads.
		for i := range file.Trials {
			file.Trials[i] = slimTrial(file.Trials[i])
		}
		file.Summary = nil
		runs = append(runs, HistoryRun{Name: e.Name(), File: file})
	}
	SortRuns(runs)
	return DriftOf(runs, o).Needs(), nil
}

// slimTrial is r with only what the drift test reads: its reasons (which
// stages are valid, whether it was cut at the hold) and the stages of the
// window and of the recommendation's covered duration.
func slimTrial(r Record) Record {
	keep := Record{Kind: r.Kind, Trial: r.Trial, Valid: r.Valid, Invalid: r.Invalid, T0: r.T0, Reasons: r.Reasons}
	for _, st := range r.Stages {
		switch st.Name {
		case StageLastAccept, StageLastRequest, StagePrestopCalled, StageSigterm:
			keep.Stages = append(keep.Stages, st)
		}
	}
	return keep
}

// SortRuns orders runs as they started (their headers' StartedAt), equal
// starts by name.
func SortRuns(runs []HistoryRun) {
	slices.SortStableFunc(runs, func(a, b HistoryRun) int {
		if n := a.File.Header.StartedAt.Compare(b.File.Header.StartedAt); n != 0 {
			return n
		}
		return strings.Compare(a.Name, b.Name)
	})
}
