package main

import (
	"encoding/json"
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
	if code := exitCode(err); code != exitLowerBound || !strings.Contains(err.Error(), "cannot tell: rerun with a longer --hold") {
		t.Errorf("--max-p99 window=2m over a ≥59.9s floor: exit %d (%v), want %d saying it cannot tell", code, err, exitLowerBound)
	}
}
