package results

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

func TestRunFileName(t *testing.T) {
	start := time.Date(2026, 12, 5, 21, 19, 41, 500e6, time.FixedZone("CET", 3600))
	name := RunFileName(start)
	if name != "run-20261205T201941Z.jsonl" {
		t.Errorf("RunFileName = %q", name)
	}
	got, ok := RunFileStart(name)
	if !ok || !got.Equal(start.Truncate(time.Second)) {
		t.Errorf("RunFileStart(%q) = %s, %v", name, got, ok)
	}
	for _, other := range []string{"run-2026.jsonl", "epwindow-20261205-201941.jsonl", "run-20261205T201941Z.csv", "lost+found", "run-20261205T201941Z.jsonl.tmp"} {
		if _, ok := RunFileStart(other); ok {
			t.Errorf("RunFileStart(%q) is a run file", other)
		}
	}
}

func TestRetentionExpired(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	// Runs every 6 hours, the newest 6 hours ago; current starts now.
	var names []string
	for i := 1; i <= 8; i++ {
		names = append(names, RunFileName(now.Add(-time.Duration(i)*6*time.Hour)))
	}
	current := RunFileName(now)
	withOthers := append([]string{current, "notes.txt", "baseline.jsonl"}, names...)
	tests := []struct {
		name string
		r    Retention
		want []int // indexes into names (1 = the newest before current)
	}{
		{"keep everything", Retention{}, nil},
		{"count: current and the 3 newest", Retention{KeepRuns: 4}, []int{4, 5, 6, 7, 8}},
		{"count 1: only current", Retention{KeepRuns: 1}, []int{1, 2, 3, 4, 5, 6, 7, 8}},
		{"age: within a day", Retention{KeepFor: 24 * time.Hour}, []int{5, 6, 7, 8}},
		{"age: exactly at the limit stays", Retention{KeepFor: 30 * time.Hour}, []int{6, 7, 8}},
		{"both: the stricter wins", Retention{KeepRuns: 3, KeepFor: 24 * time.Hour}, []int{3, 4, 5, 6, 7, 8}},
		{"more room than runs", Retention{KeepRuns: 100, KeepFor: 1000 * time.Hour}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []string
			for _, i := range reverse(tt.want) {
				want = append(want, names[i-1])
			}
			got := tt.r.Expired(withOthers, current, now)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Expired = %q, want %q", got, want)
			}
		})
	}
	// The run in progress is never dropped, even when older than the age
	// (a clock stepped back) or when it is the only file.
	if got := (Retention{KeepRuns: 1, KeepFor: time.Hour}).Expired([]string{current}, current, now.Add(48*time.Hour)); len(got) != 0 {
		t.Errorf("the current run expired: %q", got)
	}
}

// reverse returns the indexes oldest first, as Expired sorts its names.
func reverse(idx []int) []int {
	out := make([]int, len(idx))
	for i, v := range idx {
		out[len(idx)-1-i] = v
	}
	return out
}

func TestRetentionPrune(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	current := RunFileName(now)
	files := []string{current, "notes.txt"}
	for i := 1; i <= 4; i++ {
		files = append(files, RunFileName(now.Add(-time.Duration(i)*time.Hour)))
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A folder named like a run (lost+found-like clutter) is left alone.
	if err := os.Mkdir(filepath.Join(dir, RunFileName(now.Add(-100*time.Hour))), 0o755); err != nil {
		t.Fatal(err)
	}
	removed, err := Retention{KeepRuns: 2}.Prune(dir, current, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{files[5], files[4], files[3]} // oldest first
	if !reflect.DeepEqual(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	wantLeft := []string{"notes.txt", RunFileName(now.Add(-100 * time.Hour)), files[2], current}
	if !reflect.DeepEqual(left, wantLeft) {
		t.Errorf("left %q, want %q", left, wantLeft)
	}
	if _, err := (Retention{}).Prune(filepath.Join(dir, "missing"), current, now); err == nil {
		t.Error("Prune of a missing folder: no error")
	}
}

func TestRetentionValidate(t *testing.T) {
	if err := (Retention{KeepRuns: 5, KeepFor: time.Hour}).Validate("keep-runs", "keep-for"); err != nil {
		t.Error(err)
	}
	if err := (Retention{KeepRuns: -1}).Validate("keep-runs", "keep-for"); err == nil || !bytes.Contains([]byte(err.Error()), []byte("--keep-runs")) {
		t.Errorf("KeepRuns -1: %v", err)
	}
	if err := (Retention{KeepFor: -time.Hour}).Validate("keep-runs", "keep-for"); err == nil || !bytes.Contains([]byte(err.Error()), []byte("--keep-for")) {
		t.Errorf("KeepFor -1h: %v", err)
	}
}

// fullFile is a results file on a volume with room for room bytes: a write
// past it writes what fits and fails with ENOSPC, as write(2) does.
type fullFile struct {
	buf  bytes.Buffer
	room int
}

func (f *fullFile) Write(p []byte) (int, error) {
	if free := f.room - f.buf.Len(); len(p) > free {
		f.buf.Write(p[:max(free, 0)])
		return max(free, 0), &os.PathError{Op: "write", Path: "run.jsonl", Err: syscall.ENOSPC}
	}
	return f.buf.Write(p)
}

func (f *fullFile) Truncate(size int64) error {
	f.buf.Truncate(int(size))
	return nil
}

// TestWholeLinesFullVolume: a volume that fills in the middle of a trial
// leaves a file of the header and the whole trials before it, which
// Decode reads as an interrupted run, and the summary written after the
// error cannot land behind a cut line.
func TestWholeLinesFullVolume(t *testing.T) {
	spec := synthSpec{seed: 1, trials: 5, poll: time.Second}
	trials := synthTrials(spec)
	// Room for the header and two trials and half of the third.
	var probe bytes.Buffer
	pw := NewWriter(&probe)
	if err := pw.WriteHeader(synthHeader(spec)); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := pw.WriteTrial(&trials[i]); err != nil {
			t.Fatal(err)
		}
	}
	f := &fullFile{room: probe.Len() + 40}

	w := NewWriter(WholeLines(f))
	if err := w.WriteHeader(synthHeader(spec)); err != nil {
		t.Fatal(err)
	}
	var werr error
	written := 0
	for i := range trials {
		if werr = w.WriteTrial(&trials[i]); werr != nil {
			break
		}
		written++
	}
	if written != 2 || !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("wrote %d trials, then %v; want 2, then ENOSPC", written, werr)
	}
	f.room += 1 << 20 // space freed: the writer stays stopped all the same
	if err := w.WriteSummary(synthSummary(spec).Doc()); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("summary after the failure: %v, want the first error", err)
	}
	if f.buf.Len() != probe.Len() || !bytes.Equal(f.buf.Bytes(), probe.Bytes()) {
		t.Errorf("file is %d bytes, want the %d of the header and two trials", f.buf.Len(), probe.Len())
	}
	got, err := Decode(bytes.NewReader(f.buf.Bytes()))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(got.Trials) != 2 || !got.Interrupted() || got.Truncated {
		t.Errorf("decoded %d trials, interrupted %v, truncated %v; want 2, true, false", len(got.Trials), got.Interrupted(), got.Truncated)
	}
}
