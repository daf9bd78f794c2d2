package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epwindow/epwindow/results"
)

// 11 of 20 windows cut at a 60 s hold against a baseline that never passed
// 2 s (results' TestCompareCensoredRegression writes the pair): compare
// calls the window worse, by its tail test, and --max-regression 20% exits
// 3 naming the window — the rerun-after-upgrade case compare exists for.
func TestCompareCensoredRegressionExits3(t *testing.T) {
	base, next := testdata("tail-base.jsonl"), testdata("tail-new.jsonl")
	out, err := runApp(t, "compare", "--format", "json", base, next)
	if err != nil {
		t.Fatalf("compare without thresholds: %v", err)
	}
	var c results.Comparison
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("compare --format json: %v\n%s", err, out)
	}
	if m, ok := c.Metric(results.PointWindow); !ok || m.Verdict != results.Worse || m.Tail == nil || !m.Tail.Significant {
		t.Errorf("window: %+v, want worse by the tail test", m)
	}
	_, err = runApp(t, "compare", "--max-regression", "20%", base, next)
	if code := exitCode(err); code != exitThreshold || !strings.Contains(err.Error(), "max-regression: window:") {
		t.Errorf("compare --max-regression 20%%: exit %d (%v), want %d naming window", code, err, exitThreshold)
	}
}

// --max-p99 against floors: the new run's p99 falls on a trial cut at the
// hold. A floor above the limit is a breach (exit 3); a floor within it
// cannot show the limit was met (exit 6, "rerun with a longer --hold").
func TestCompareMaxP99Floor(t *testing.T) {
	base, next := testdata("tail-base.jsonl"), testdata("tail-new.jsonl")
	_, err := runApp(t, "compare", "--max-p99", "window=10s", base, next)
	if code := exitCode(err); code != exitThreshold {
		t.Errorf("--max-p99 window=10s under a ≥59.9s floor: exit %d (%v), want %d", code, err, exitThreshold)
	}
	_, err = runApp(t, "compare", "--max-p99", "window=2m", base, next)
	if code := exitCode(err); code != exitLowerBound || !strings.Contains(err.Error(), "cannot tell: rerun with a longer --hold") ||
		strings.Contains(err.Error(), "breached") {
		t.Errorf("--max-p99 window=2m over a ≥59.9s floor: exit %d (%v), want %d saying it cannot tell", code, err, exitLowerBound)
	}
}

// rewriteTrials writes a copy of results testdata file name to a temporary
// file, each trial line passed through edit (the line dropped when edit
// returns false), and returns its path.
func rewriteTrials(t *testing.T, name string, edit func(trial map[string]any) bool) string {
	t.Helper()
	data, err := os.ReadFile(testdata(name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch m["kind"] {
		case "summary":
			continue // recomputed from the trials
		case "trial":
			if !edit(m) {
				continue
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A new run none of whose trials measured the window (every probe clock
// invalid) is no evidence: compare exits 2 naming the file, before any
// gate could pass on it.
func TestCompareNoWindowExits2(t *testing.T) {
	blind := rewriteTrials(t, "run.jsonl", func(tr map[string]any) bool {
		tr["valid"] = false
		tr["reasons"] = []any{map[string]any{"code": results.ReasonSkewMissing}}
		return true
	})
	_, err := runApp(t, "compare", "--max-regression", "20%", testdata("run.jsonl"), blind)
	if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), blind) || !strings.Contains(err.Error(), "no trial that measured the window") {
		t.Errorf("compare against a run without a window: exit %d (%v), want %d naming the file", code, err, exitUsage)
	}
}

// Runs too small for any test (3 trials each): compare says so per metric,
// and --max-regression exits 6 saying it cannot tell, not "breached".
func TestCompareTinyRunsCannotTell(t *testing.T) {
	tiny := rewriteTrials(t, "run.jsonl", func(tr map[string]any) bool { return tr["trial"].(float64) <= 3 })
	out, err := runApp(t, "compare", tiny, tiny)
	if err != nil || !strings.Contains(out, "window: not judged: n too small (needs n=") {
		t.Errorf("compare of 3-trial runs: %v, want the window not judged for n too small:\n%s", err, out)
	}
	_, err = runApp(t, "compare", "--max-regression", "20%", tiny, tiny)
	if code := exitCode(err); code != exitLowerBound || !strings.Contains(err.Error(), "cannot tell whether the thresholds were met") ||
		strings.Contains(err.Error(), "breached") || !strings.Contains(err.Error(), "max-regression: window: not judged") {
		t.Errorf("compare --max-regression of 3-trial runs: exit %d (%v), want %d saying it cannot tell for the window", code, err, exitLowerBound)
	}
}
