package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/results"
)

func parseHistory(t *testing.T, args ...string) (*historyDir, error) {
	t.Helper()
	return parseWith(t, measureCommand(), historyConfig, args...)
}

func TestHistoryConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := parseHistory(t, "--history", dir, "--keep-runs", "30", "--keep-for", "720h")
	if err != nil {
		t.Fatal(err)
	}
	if h.dir != dir || h.keep != (results.Retention{KeepRuns: 30, KeepFor: 720 * time.Hour}) || h.drift.BaselineTrials != results.DefaultBaselineTrials {
		t.Errorf("history = %+v", h)
	}
	if h, err := parseHistory(t); h != nil || err != nil {
		t.Errorf("no --history: %+v, %v; want nil, nil", h, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the write check left files: %v", entries)
	}

	bad := []struct {
		args []string
		want []string // in the error
	}{
		{[]string{"--history", filepath.Join(dir, "missing")}, []string{"--history", "no such folder"}},
		{[]string{"--history", file}, []string{"--history", "not a folder"}},
		{[]string{"--history", dir, "--out", "x.jsonl"}, []string{"--out", "--history"}},
		{[]string{"--keep-runs", "3"}, []string{"--keep-runs needs --history"}},
		{[]string{"--keep-for", "24h"}, []string{"--keep-for needs --history"}},
		{[]string{"--history", dir, "--keep-runs", "-1"}, []string{"--keep-runs"}},
		{[]string{"--history", dir, "--keep-for", "-1h"}, []string{"--keep-for"}},
		{[]string{"--baseline-trials", "40"}, []string{"--baseline-trials needs --history"}},
		{[]string{"--history", dir, "--window-trials", "0"}, []string{"--window-trials 0"}},
	}
	for _, tt := range bad {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseHistory(t, tt.args...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestHistoryNotWritable: a folder no file can be created in is refused
// before the run, naming the flag.
func TestHistoryNotWritable(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	if os.Geteuid() == 0 {
		// root writes through permission bits; sysfs's root folder
		// refuses even root.
		dir = "/sys"
	}
	if f, err := os.CreateTemp(dir, "probe-*"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skipf("%s is writable here", dir)
	}
	_, err := parseHistory(t, "--history", dir)
	if err == nil || !strings.Contains(err.Error(), "--history") || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("error = %v, want --history … not writable", err)
	}
}

// TestHistoryPrune: a run prunes the folder as it starts, never its own
// file; without retention flags it touches nothing.
func TestHistoryPrune(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	h := &historyDir{dir: dir, keep: results.Retention{KeepRuns: 2}}
	var paths []string
	for i := range 4 {
		p := h.path(now.Add(-time.Duration(i) * time.Hour))
		paths = append(paths, p)
		if err := os.WriteFile(p, []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := (&historyDir{dir: dir}).prune(paths[0], now); err != nil || len(removed) != 0 {
		t.Errorf("no retention: removed %v, %v", removed, err)
	}
	removed, err := h.prune(paths[0], now)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Errorf("removed %v, want the 2 oldest", removed)
	}
	for i, p := range paths {
		_, err := os.Stat(p)
		if kept := err == nil; kept != (i < 2) {
			t.Errorf("%s kept = %v", filepath.Base(p), kept)
		}
	}
}

// fullAfter is a results file on a volume that takes writes whole until
// writes are used up, then refuses each with ENOSPC.
type fullAfter struct {
	bytes.Buffer
	writes int
}

func (f *fullAfter) Write(p []byte) (int, error) {
	if f.writes == 0 {
		return 0, &os.PathError{Op: "write", Path: "run.jsonl", Err: syscall.ENOSPC}
	}
	f.writes--
	return f.Buffer.Write(p)
}

func (f *fullAfter) Truncate(size int64) error {
	f.Buffer.Truncate(int(size))
	return nil
}

// TestFullVolume: measure's sink over a volume that fills at the second
// trial keeps the header and the first trial as a valid partial file, and
// the run's error says so.
func TestFullVolume(t *testing.T) {
	trial := func(n int) *results.Record { return &results.Record{Trial: n, Pod: "probe-abc", Valid: true} }
	f := &fullAfter{writes: 2} // the header and one trial
	sink := &fileSink{w: results.NewWriter(results.WholeLines(f))}
	if err := sink.Header(&results.Header{Namespace: "epwindow"}); err != nil {
		t.Fatal(err)
	}
	if err := sink.Trial(trial(1)); err != nil {
		t.Fatal(err)
	}
	err := sink.Trial(trial(2))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("second trial: %v, want ENOSPC", err)
	}
	got, derr := results.Decode(bytes.NewReader(f.Bytes()))
	if derr != nil || got.Header == nil || len(got.Trials) != 1 {
		t.Fatalf("partial file: %+v, %v; want the header and 1 trial", got, derr)
	}
	msg, ok := fullVolume(err, "/history/run.jsonl", sink.header != nil, 1)
	for _, w := range []string{"/history/run.jsonl", "full", "1 finished trials", "valid partial", "--keep-runs"} {
		if !ok || !strings.Contains(msg, w) {
			t.Errorf("message %q does not say %q", msg, w)
		}
	}

	// Full before the header: no file is kept, and the message says so.
	sink = &fileSink{w: results.NewWriter(results.WholeLines(&fullAfter{}))}
	err = sink.Header(&results.Header{})
	if sink.header != nil {
		t.Error("a header the volume refused counts as written")
	}
	if msg, ok := fullVolume(err, "run.jsonl", sink.header != nil, 0); !ok || !strings.Contains(msg, "no results file") {
		t.Errorf("message %q", msg)
	}
	if _, ok := fullVolume(errors.New("watch broke"), "run.jsonl", true, 3); ok {
		t.Error("another error taken for a full volume")
	}
}

// TestOpenSinkHistory: with --history the run's file appears in the folder
// only with its header — `epwindow history` reads the folder while a run
// sets up — and the folder is pruned first, never of the run's own file.
func TestOpenSinkHistory(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, results.RunFileName(time.Now().Add(-48*time.Hour)))
	if err := os.WriteFile(old, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type opened struct {
		sink *fileSink
		path string
	}
	got, err := parseWith(t, measureCommand(), func(c *cli.Context) (opened, error) {
		h, err := historyConfig(c)
		if err != nil {
			return opened{}, err
		}
		sink, path, err := openSink(c, h, results.Options{}, time.Minute)
		return opened{sink, path}, err
	}, "--history", dir, "--keep-for", "24h")
	if err != nil {
		t.Fatal(err)
	}
	defer got.sink.close()
	if filepath.Dir(got.path) != dir {
		t.Errorf("results file %s is not in --history %s", got.path, dir)
	}
	if _, ok := results.RunFileStart(filepath.Base(got.path)); !ok {
		t.Errorf("results file %s is not named like a run", got.path)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run of two days ago is still there with --keep-for 24h: %v", err)
	}
	if _, err := os.Stat(got.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the results file exists before its header: %v", err)
	}
	if err := got.sink.Header(&results.Header{Namespace: "epwindow"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(got.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if file, err := results.Decode(f); err != nil || file.Header == nil {
		t.Errorf("after the header the file decodes to %+v, %v", file, err)
	}
}
