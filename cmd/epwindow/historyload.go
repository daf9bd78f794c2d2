package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/epwindow/epwindow/monitor"
	"github.com/epwindow/epwindow/results"
)

// futureTolerance is how far after the read time a run may say it started
// and still be read. A run's start is its node's clock, the read time the
// history server's: on NTP-synced nodes they differ by milliseconds, and a
// CronJob's run is stamped after its pod started, never before its
// schedule. Ten minutes is far above any skew a synced cluster shows, so a
// run beyond it was stamped by a clock that is wrong (a node without NTP,
// a VM restored from a snapshot); such a run would sort as the newest
// until that date, hide every later run from the judgement and hold
// epwindow_last_trial_timestamp_seconds ahead, silencing
// EpwindowScheduleStopped. Within the tolerance a run at most moves among
// neighbours hours apart, and holds that alert off by no more than ten
// minutes of its hours.
const futureTolerance = 10 * time.Minute

// historySkip is a file of a history that is not read as a run.
type historySkip struct {
	path string
	// reason is one of monitor.SkipReasons.
	reason string
	detail string
}

func (s historySkip) String() string {
	return fmt.Sprintf("%s: %s (%s), skipped", s.path, s.detail, s.reason)
}

// historyLoad is one read of a history: its runs, oldest first, and the
// files that are not among them.
type historyLoad struct {
	runs    []results.HistoryRun
	skipped []historySkip
}

// skippedBy counts the skipped files by reason, every reason present.
func (l *historyLoad) skippedBy() map[string]int {
	n := make(map[string]int, len(monitor.SkipReasons))
	for _, r := range monitor.SkipReasons {
		n[r] = 0
	}
	for _, s := range l.skipped {
		n[s.reason]++
	}
	return n
}

// sameRuns reports whether l holds the very runs prev held, each the
// same parse of an unchanged file: prev's judgement stands, and a server
// that reads every minute need not replay it (a history changes when a
// run writes, minutes in hours).
func (l *historyLoad) sameRuns(prev *historyLoad) bool {
	return prev != nil && slices.EqualFunc(l.runs, prev.runs, func(a, b results.HistoryRun) bool {
		return a.Name == b.Name && a.File == b.File
	})
}

// historyLoader reads a history, again and again under history --serve:
// it keeps each file it parsed, keyed by path, and parses it again only
// when its size or modification time changed (a run still going appends
// to its file); a file gone is dropped.
type historyLoader struct {
	files map[string]parsedFile
}

// parsedFile is what a file held when it was parsed: a run and its
// identity, or why it is not one; gone when it was removed since listed.
type parsedFile struct {
	size  int64
	mtime time.Time
	file  *results.File
	id    string
	skip  *historySkip
	gone  bool
}

func newHistoryLoader() *historyLoader {
	return &historyLoader{files: map[string]parsedFile{}}
}

// load reads the runs of args (see historyFiles) at now. Files that are
// not runs (empty, no header, not results at all, unreadable), runs
// stamped after now by more than futureTolerance, and further copies of a
// run are skipped, each named in the load's skipped files. An error is a
// read of the history that failed as a whole: a folder or a named file
// missing.
func (hl *historyLoader) load(args []string, emptyOK bool, now time.Time) (*historyLoad, error) {
	files, err := historyFiles(args, emptyOK)
	if err != nil {
		return nil, err
	}
	l := &historyLoad{}
	seen := make(map[string]bool, len(files))
	type kept struct {
		i    int // in l.runs
		path string
	}
	byID := map[string]kept{}
	for i, p := range hl.parseAll(files) {
		path := files[i]
		if p.gone {
			continue // removed since listed (retention)
		}
		seen[path] = true
		if p.skip != nil {
			l.skipped = append(l.skipped, *p.skip)
			continue
		}
		if start := p.file.Header.StartedAt; start.After(now.Add(futureTolerance)) {
			l.skipped = append(l.skipped, historySkip{path: path, reason: monitor.SkipFuture,
				detail: fmt.Sprintf("started at %s, %v after the read: a node's clock is wrong (tolerance %v)",
					start.UTC().Format(time.RFC3339), start.Sub(now).Round(time.Second), futureTolerance)})
			continue
		}
		run := results.HistoryRun{Name: filepath.Base(path), File: p.file}
		k, dup := byID[p.id]
		if !dup {
			byID[p.id] = kept{len(l.runs), path}
			l.runs = append(l.runs, run)
			continue
		}
		// The same run twice (a copied file): pool it once, the fuller
		// copy (a copy taken while the run went on lacks its last trials).
		if fuller(run.File, l.runs[k.i].File) {
			l.runs[k.i], run = run, l.runs[k.i]
			byID[p.id], path = kept{k.i, path}, k.path
		}
		l.skipped = append(l.skipped, historySkip{path: path, reason: monitor.SkipDuplicate,
			detail: "the same run as " + byID[p.id].path + " (same header), pooled once"})
	}
	for path := range hl.files {
		if !seen[path] {
			delete(hl.files, path)
		}
	}
	results.SortRuns(l.runs)
	slices.SortFunc(l.skipped, func(a, b historySkip) int { return strings.Compare(a.path, b.path) })
	return l, nil
}

// fuller reports whether a holds more of a run than b: more trials, or
// as many and the summary b lacks.
func fuller(a, b *results.File) bool {
	return cmp.Or(cmp.Compare(len(a.Trials), len(b.Trials)), cmp.Compare(b2i(a.Summary != nil), b2i(b.Summary != nil))) > 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseAll is the content of each of files, from the last parse while
// a file's size and modification time are unchanged; the others are
// parsed side by side, a file per core (a first read of a 500-run history
// is JSON decoding), and kept for the next read.
func (hl *historyLoader) parseAll(files []string) []parsedFile {
	ps := make([]parsedFile, len(files))
	fresh := make([]bool, len(files))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, path := range files {
		g.Go(func() error {
			ps[i], fresh[i] = hl.parse(path)
			return nil
		})
	}
	g.Wait() // parse reports a file's problem in it, not as an error
	for i, path := range files {
		if fresh[i] {
			hl.files[path] = ps[i]
		}
	}
	return ps
}

// parse is path's content, from the last parse while its size and
// modification time are unchanged; fresh is set when it was parsed now
// and is to be kept. It only reads the loader's files.
func (hl *historyLoader) parse(path string) (p parsedFile, fresh bool) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return parsedFile{gone: true}, false
	}
	var data []byte
	if err == nil {
		if p, ok := hl.files[path]; ok && p.size == st.Size() && p.mtime.Equal(st.ModTime()) {
			return p, false
		}
		data, err = os.ReadFile(path)
	}
	if err != nil {
		// Not kept: a permission may come back.
		return parsedFile{skip: &historySkip{path: path, reason: monitor.SkipUnreadable, detail: err.Error()}}, false
	}
	p = parsedFile{size: st.Size(), mtime: st.ModTime()}
	if p.file, err = decodeRun(data); err == nil {
		p.id, err = runID(p.file.Header)
	}
	switch {
	case len(data) == 0:
		p.skip = &historySkip{path: path, reason: monitor.SkipEmpty, detail: "empty file: a run that has not written its header (yet)"}
	case err != nil:
		p.skip = &historySkip{path: path, reason: monitor.SkipInvalid, detail: err.Error()}
	}
	return p, true
}

// decodeRun decodes a run's results file: JSON lines that start with a
// header (what measure writes). Anything else is said as such, not as
// the CSV decoder's complaint about a file it was never meant to read.
func decodeRun(data []byte) (*results.File, error) {
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("not a run's results (JSON lines starting with a header record, as measure writes)")
	}
	file, err := results.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	if file.Header == nil {
		return nil, errors.New("no header record: a history needs each run's settings and start (measure's JSON lines)")
	}
	return file, nil
}

// runID identifies a run by its header: the start to the nanosecond, the
// cluster and every flag and setting make two runs' headers differ, and a
// copied file keeps its run's. The header re-encoded, not its line as
// written: map keys sort, so equal headers encode equally.
func runID(h *results.Header) (string, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("header: %w", err)
	}
	return string(b), nil
}

// warnSkipped writes a warning for each skipped file not skipped, for the
// same reason, at the previous read (prev; nil for the first), so that a
// server reading every minute says each once.
func warnSkipped(w io.Writer, cmd string, l, prev *historyLoad) {
	before := map[historySkip]bool{}
	if prev != nil {
		for _, s := range prev.skipped {
			before[historySkip{path: s.path, reason: s.reason}] = true
		}
	}
	for _, s := range l.skipped {
		if !before[historySkip{path: s.path, reason: s.reason}] {
			fmt.Fprintf(w, "epwindow %s: warning: %s\n", cmd, s)
		}
	}
}

// noRuns says why a history that should hold runs holds none: every
// file given was skipped, for these reasons.
func noRuns(l *historyLoad) error {
	var reasons []string
	for _, s := range l.skipped {
		if !slices.Contains(reasons, s.reason) {
			reasons = append(reasons, s.reason)
		}
	}
	return fmt.Errorf("no run to read: all %d file(s) were skipped (%s; see the warnings above)", len(l.skipped), strings.Join(reasons, ", "))
}
