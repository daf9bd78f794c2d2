package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/monitor"
)

// runAppStderr runs the app on args: its output, its warnings and error.
func runAppStderr(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp("epwindow")
	app.Writer, app.ErrWriter = &out, &errOut
	app.ExitErrHandler = func(*cli.Context, error) {}
	err = runCLI(context.Background(), app, append([]string{"epwindow"}, args...))
	return out.String(), errOut.String(), err
}

// A file that is not (yet) a run does not fail the history: a zero-byte
// run file (a run creating its file, a full volume before the header), a
// stray notes file and a CSV export are skipped, each named with why,
// and the runs are judged as without them. Only when nothing is left is it
// bad input, said as such.
func TestHistorySkipsFilesThatAreNotRuns(t *testing.T) {
	dir := t.TempDir()
	for i := range 8 {
		writeHistoryRun(t, dir, i, "v1.37.2", 0)
	}
	want, _, err := runAppStderr(t, "history", dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"run-20261203T000000Z.jsonl": "",
		"notes.jsonl":                "rerun after the upgrade\n",
		"trials.jsonl":               `{"kind":"trial","trial":1,"stages":[]}` + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, warnings, err := runAppStderr(t, "history", dir)
	if err != nil || out != want {
		t.Errorf("history with files that are not runs: %v, want the report of the runs alone\n%s\nwant\n%s", err, out, want)
	}
	for _, w := range []string{
		"run-20261203T000000Z.jsonl: empty file: a run that has not written its header (yet) (empty), skipped",
		"notes.jsonl: not a run's results (JSON lines starting with a header record, as measure writes) (invalid), skipped",
		"trials.jsonl: no header record",
	} {
		if !strings.Contains(warnings, w) {
			t.Errorf("warnings lack %q:\n%s", w, warnings)
		}
	}
	if strings.Contains(warnings, "csv header") {
		t.Errorf("a stray file is reported as a CSV:\n%s", warnings)
	}

	only := t.TempDir()
	empty := filepath.Join(only, "run-20261203T000000Z.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{only, empty} {
		_, warnings, err := runAppStderr(t, "history", arg)
		if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), "no run to read: all 1 file(s) were skipped (empty") ||
			!strings.Contains(warnings, empty) {
			t.Errorf("history %s (one empty file): exit %d (%v), want %d saying no run is left, the file named\n%s", arg, code, err, exitUsage, warnings)
		}
	}
}

// A run stamped in the future (a node's clock) is not read until its
// start is near: it would be the newest run for years. Within the
// tolerance it is read; the read time is passed in.
func TestHistoryLoadFutureRun(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		writeHistoryRun(t, dir, i, "v1.37.2", 0)
	}
	now := historyStart.Add(12*time.Hour + time.Minute) // the third run started a minute ago
	writeRunFile(t, filepath.Join(dir, "run-clock-ahead.jsonl"), now.Add(futureTolerance-time.Second), "v1.37.2", 0, func(int) time.Duration { return 0 })
	writeRunFile(t, filepath.Join(dir, "run-2031.jsonl"), now.Add(5*365*24*time.Hour), "v1.37.2", 0, func(int) time.Duration { return 0 })
	hl := newHistoryLoader()
	l, err := hl.load([]string{dir}, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := runNames(l); got != "run-000.jsonl run-001.jsonl run-002.jsonl run-clock-ahead.jsonl" {
		t.Errorf("runs read at %s: %s, want the run within %v of it and not the one years ahead", now, got, futureTolerance)
	}
	if len(l.skipped) != 1 || l.skipped[0].reason != monitor.SkipFuture || !strings.Contains(l.skipped[0].String(), "run-2031.jsonl: started at 2031-") {
		t.Errorf("skipped %v, want run-2031.jsonl as future", l.skipped)
	}
	if n := l.skippedBy(); n[monitor.SkipFuture] != 1 || len(n) != len(monitor.SkipReasons) {
		t.Errorf("skipped by reason %v, want 1 future and every reason counted", n)
	}
	// Once its time has come, the run is read (from the loader's cache).
	l, err = hl.load([]string{dir}, false, now.Add(5*365*24*time.Hour))
	if err != nil || len(l.runs) != 5 || len(l.skipped) != 0 {
		t.Errorf("read five years on: %v, %s, skipped %v; want all five runs", err, runNames(l), l.skipped)
	}
}

// The CLI reads the history at its own now: a run dated 2099 is left out
// of the judgement and named.
func TestHistoryFutureRunNotNewest(t *testing.T) {
	dir := t.TempDir()
	for i := range 8 {
		writeHistoryRun(t, dir, i, "v1.37.2", 0)
	}
	writeRunFile(t, filepath.Join(dir, "run-20990101T000000Z.jsonl"), time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), "v1.37.2", 0,
		func(int) time.Duration { return 30 * time.Second })
	out, warnings, err := runAppStderr(t, "history", "--fail-on-worse", dir)
	if err != nil || !strings.Contains(out, "newest run run-007.jsonl: window same") ||
		!strings.Contains(warnings, "run-20990101T000000Z.jsonl: started at 2099-01-01T00:00:00Z") || !strings.Contains(warnings, "(future), skipped") {
		t.Errorf("history with a run dated 2099: %v, want run-007 newest and the 2099 run named\n%s\n%s", err, out, warnings)
	}
}

// The same run twice is pooled once: one run with 1 slow trial in 10 is
// judged the same against its baseline, and so it stays with twelve
// copies of it beside it (pooled as thirteen runs, the copies' twelve slow
// trials in a window of 120 were worse); each copy is named with the file
// it copies.
func TestHistoryDuplicateRunPooledOnce(t *testing.T) {
	dir := t.TempDir()
	for i := range 14 {
		writeRunFile(t, filepath.Join(dir, fmt.Sprintf("run-%03d.jsonl", i)), historyStart.Add(time.Duration(i)*6*time.Hour), "v1.37.2", 10,
			func(int) time.Duration { return 0 })
	}
	slowRun := filepath.Join(dir, "run-100.jsonl")
	writeRunFile(t, slowRun, historyStart.Add(100*time.Hour), "v1.37.2", 10, func(n int) time.Duration {
		if n == 2 {
			return 30 * time.Second
		}
		return 0
	})
	want, _, err := runAppStderr(t, "history", "--fail-on-worse", dir)
	if err != nil || !strings.Contains(want, "newest run run-100.jsonl: window same") {
		t.Fatalf("one run with 1 slow trial in 10: %v, want it judged the same\n%s", err, want)
	}
	data, err := os.ReadFile(slowRun)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("copy-%02d.jsonl", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, warnings, err := runAppStderr(t, "history", "--fail-on-worse", dir)
	if err != nil || !strings.Contains(out, "window same") {
		t.Errorf("the run and twelve copies: %v, want it judged as the one run\n%s", err, out)
	}
	if n := strings.Count(warnings, "(duplicate), skipped"); n != 12 {
		t.Errorf("%d copies warned about, want 12:\n%s", n, warnings)
	}
	// The copies sort before the run by name; one of each pair is named
	// as the copy of the other.
	if !strings.Contains(warnings, "the same run as "+filepath.Join(dir, "copy-00.jsonl")) && !strings.Contains(warnings, "the same run as "+slowRun) {
		t.Errorf("the copies' warnings name no file they copy:\n%s", warnings)
	}
}

// A copy taken while the run went on holds fewer trials: the fuller file
// is the one pooled, whichever sorts first.
func TestHistoryLoadDuplicateKeepsFullerCopy(t *testing.T) {
	dir := t.TempDir()
	start := historyStart
	writeRunFile(t, filepath.Join(dir, "a-partial.jsonl"), start, "v1.37.2", 5, func(int) time.Duration { return 0 })
	writeRunFile(t, filepath.Join(dir, "b-whole.jsonl"), start, "v1.37.2", 0, func(int) time.Duration { return 0 })
	l, err := newHistoryLoader().load([]string{dir}, false, start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if runNames(l) != "b-whole.jsonl" || len(l.skipped) != 1 || l.skipped[0].path != filepath.Join(dir, "a-partial.jsonl") ||
		!strings.Contains(l.skipped[0].detail, "b-whole.jsonl") {
		t.Errorf("runs %s, skipped %v; want b-whole.jsonl pooled and a-partial.jsonl named its copy", runNames(l), l.skipped)
	}
}

// Under --serve the history is read every minute: a file is parsed again
// only when its size or modification time changed, a file gone is
// dropped, and a new one read.
func TestHistoryLoaderCache(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		writeHistoryRun(t, dir, i, "v1.37.2", 0)
	}
	hl := newHistoryLoader()
	now := historyStart.Add(24 * time.Hour)
	first, err := hl.load([]string{dir}, false, now)
	if err != nil {
		t.Fatal(err)
	}
	again, err := hl.load([]string{dir}, false, now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first.runs {
		if first.runs[i].File != again.runs[i].File {
			t.Errorf("%s parsed again though unchanged", first.runs[i].Name)
		}
	}
	// A stray file changes what is skipped, not the runs: the judgement
	// stands.
	if err := os.WriteFile(filepath.Join(dir, "notes.jsonl"), []byte("notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err = hl.load([]string{dir}, false, now); err != nil || !again.sameRuns(first) || len(again.skipped) != 1 {
		t.Errorf("an unchanged history with a stray file: %v, same runs %v, skipped %v; want the same runs and the file skipped", err, again.sameRuns(first), again.skipped)
	}
	// A run still going appends a trial: size and time change.
	path := filepath.Join(dir, "run-002.jsonl")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	if err := os.WriteFile(path, []byte(strings.Join(lines[:len(lines)-3], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "run-000.jsonl"))
	writeHistoryRun(t, dir, 3, "v1.37.2", 0)
	next, err := hl.load([]string{dir}, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := runNames(next); got != "run-001.jsonl run-002.jsonl run-003.jsonl" {
		t.Fatalf("after a removal and a new run: %s", got)
	}
	if next.sameRuns(again) {
		t.Error("a history with a run gone, one changed and one new holds the same runs, to sameRuns")
	}
	if next.runs[0].File != first.runs[1].File {
		t.Error("run-001.jsonl parsed again though unchanged")
	}
	if next.runs[1].File == first.runs[2].File || len(next.runs[1].File.Trials) >= len(first.runs[2].File.Trials) {
		t.Errorf("run-002.jsonl, changed, not parsed again (%d trials)", len(next.runs[1].File.Trials))
	}
	if _, kept := hl.files[filepath.Join(dir, "run-000.jsonl")]; kept || len(hl.files) != 4 {
		t.Errorf("the loader keeps %d files, want the 4 there (run-000.jsonl gone)", len(hl.files))
	}
}

func runNames(l *historyLoad) string {
	if l == nil {
		return ""
	}
	var names []string
	for _, r := range l.runs {
		names = append(names, r.Name)
	}
	return strings.Join(names, " ")
}

// BenchmarkHistoryLoad: reading a history of 500 runs (the default
// --keep-runs) the first time, and again unchanged as history --serve
// does every --refresh (its judgement then skipped: sameRuns).
func BenchmarkHistoryLoad(b *testing.B) {
	dir := b.TempDir()
	for i := range 500 {
		writeRunFile(b, filepath.Join(dir, fmt.Sprintf("run-%03d.jsonl", i)), historyStart.Add(time.Duration(i)*6*time.Hour), "v1.37.2", 10,
			func(int) time.Duration { return 0 })
	}
	now := historyStart.Add(500 * 6 * time.Hour)
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprint("cached=", cached), func(b *testing.B) {
			hl := newHistoryLoader()
			if _, err := hl.load([]string{dir}, false, now); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if !cached {
					hl = newHistoryLoader()
				}
				if _, err := hl.load([]string{dir}, false, now); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/read")
		})
	}
}
