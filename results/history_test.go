package results

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// historyRun is one scheduled run of 10 trials (the example:
// --trials 10 every 6 h) of lognormal windows, each trial slow by +30 s
// with probability pSlow, on Kubernetes version.
func historyRun(seed uint64, i int, pSlow float64, version string) HistoryRun {
	s := windowRun(seed, 10, lognormal, pSlow, 30*time.Second)
	h := *s.Header
	h.ServerVersion = version
	h.StartedAt = synthStart.Add(time.Duration(i) * 6 * time.Hour)
	f := &File{Format: FormatJSONLines, Header: &h}
	for _, r := range s.Records() {
		f.Trials = append(f.Trials, *r)
	}
	return HistoryRun{Name: fmt.Sprintf("run-%03d.jsonl", i), File: f}
}

// A change of settings splits the history: the runs before it are never
// pooled with those after, the boundary names the change, and the first
// runs after it are not judged until a new baseline fills.
func TestDriftSegments(t *testing.T) {
	var runs []HistoryRun
	for i := range 20 {
		v := "v1.36.4"
		if i >= 15 {
			v = "v1.37.2"
		}
		runs = append(runs, historyRun(uint64(100+i), i, 0, v))
	}
	d := DriftOf(runs, DriftOptions{})
	if len(d.Segments) != 2 || d.Segments[1].First != 15 || d.Segments[1].Last != 19 {
		t.Fatalf("segments %+v, want two, the second from run 15", d.Segments)
	}
	if ch := d.Segments[1].Changes; len(ch) != 1 || ch[0] != "kubernetes: v1.36.4 → v1.37.2" {
		t.Errorf("changes %q, want the Kubernetes version named", ch)
	}
	l := d.Latest
	if l.Verdict != NotJudged || l.BaselineN != 40 || l.Need != DefaultBaselineTrials-40 || d.Comparison != nil {
		t.Errorf("latest %+v: want not judged, 40 trials of the new segment before it, needing %d more", l, DefaultBaselineTrials-40)
	}
	for _, i := range append(l.Baseline, l.Window...) {
		if i < 15 {
			t.Errorf("run %d of the old settings pooled after the change", i)
		}
	}
}

// driftHistories replays h histories of runs runs each, the slow mode in
// pSlow of deletions from run from on (from < 0: never), and returns per
// history the runs judged worse and better.
func driftHistories(h, runs, from int, pSlow float64) (worse, better [][]int) {
	for k := range h {
		var hist []HistoryRun
		for i := range runs {
			p := 0.0
			if from >= 0 && i >= from {
				p = pSlow
			}
			hist = append(hist, historyRun(uint64(1_000_000+1000*k+i), i, p, "v1.37.2"))
		}
		var w, b []int
		for _, v := range DriftOf(hist, DriftOptions{}).Tests {
			switch v.Verdict {
			case Worse:
				w = append(w, v.Run)
			case Better:
				b = append(b, v.Run)
			}
		}
		worse, better = append(worse, w), append(better, b)
	}
	return worse, better
}

// No change: each judged run of a history is a comparison of two samples
// of one setup, so it calls the window changed with at most the window's
// share of the family error (2.5%): the false alarms a scheduled run
// raises. 40 histories of 24 runs of 10 trials: runs 12–23 are judged (the
// first 12 fill the 120-trial baseline), 480 judged runs in all; 12 (2.5%)
// is the promise, a count above 20 would be well outside its binomial
// spread (p ≈ 0.2%).
func TestDriftFalseAlarms(t *testing.T) {
	const histories, runs = 40, 24
	worse, better := driftHistories(histories, runs, -1, 0)
	judged := histories * (runs - DefaultBaselineTrials/10)
	alarms, hit := 0, 0
	for k := range worse {
		n := len(worse[k]) + len(better[k])
		alarms += n
		if n > 0 {
			hit++
		}
	}
	t.Logf("%d of %d judged runs called changed; %d of %d histories had one", alarms, judged, hit, histories)
	if alarms > 20 {
		t.Errorf("%d of %d judged runs of like histories called changed: above the window's 2.5%% share", alarms, judged)
	}
}

// A controller upgrade that makes 10% of deletions 30 s slower, from the
// first run after the baseline filled: the scheduled runs catch it within
// a few runs as the window pools them (12 runs of 10 trials make the 120
// a side at which the power table gives 90%), and once caught it stays
// caught (the baseline is held before the change) instead of becoming the
// new normal.
func TestDriftCatchesSlowMode(t *testing.T) {
	const histories, runs, from = 30, 30, 12
	worse, _ := driftHistories(histories, runs, from, 0.10)
	var delays []int
	held := 0
	for k, w := range worse {
		if len(w) == 0 || w[0] < from {
			continue
		}
		delays = append(delays, w[0]-from+1)
		// Held: the newest run, its window all slow-mode runs, is still
		// judged against the baseline before the change.
		if w[len(w)-1] == runs-1 {
			held++
		} else {
			t.Logf("history %d: worse at runs %v, not at the last run", k, w)
		}
	}
	slices.Sort(delays)
	t.Logf("caught in %d of %d histories, still worse at the newest run in %d; runs of 10 trials until caught: %v", len(delays), histories, held, delays)
	if held < len(delays)*3/4 {
		t.Errorf("still worse at the newest run in %d of the %d histories that caught the slow mode, want 3 in 4: the change was absorbed", held, len(delays))
	}
	if len(delays) < histories*8/10 {
		t.Errorf("a 10%% slow mode caught in %d of %d histories within %d runs, want ≥ 80%%", len(delays), histories, runs-from)
	}
	if med := delays[len(delays)/2]; med > 12 {
		t.Errorf("median %d runs until caught, want within the 12 that make 120 trials", med)
	}
}

// The report's words for a run not judged say what is missing.
func TestDriftNeedSaysHowMany(t *testing.T) {
	runs := []HistoryRun{historyRun(1, 0, 0, "v1"), historyRun(2, 1, 0, "v1")}
	d := DriftOf(runs, DriftOptions{})
	if d.Latest.Need != DefaultBaselineTrials-10 || !strings.Contains(fmt.Sprint(d.Latest.Window), "1") {
		t.Errorf("latest %+v: want run 1 tested against a baseline of run 0, %d trials short", d.Latest, DefaultBaselineTrials-10)
	}
}

// A run that has timed no deletion yet (a scheduled run that has just
// started: its file holds the header only) carries no evidence: the newest
// judgement stays the last run that has trials, so that the served bound
// and verdict do not vanish at the start of every run (an alert's `for`
// would start over each time).
func TestDriftSkipsRunsWithoutTrials(t *testing.T) {
	runs := []HistoryRun{historyRun(1, 0, 0, "v1"), historyRun(2, 1, 0, "v1")}
	started := historyRun(3, 2, 0, "v1")
	started.File.Trials = nil
	runs = append(runs, started)
	d := DriftOf(runs, DriftOptions{})
	if d.Latest.Run != 1 || d.Latest.WindowP50NS <= 0 || d.Latest.WindowN != 10 {
		t.Errorf("latest %+v: want run 1, the newest with trials, and its window", d.Latest)
	}
	for _, v := range d.Tests {
		if v.Run == 2 {
			t.Errorf("run 2, without trials, was tested: %+v", v)
		}
	}
	// A history whose newest segment has no trial at all still says so.
	only := DriftOf([]HistoryRun{started}, DriftOptions{})
	if only.Latest.Run != 0 || only.Latest.Verdict != NotJudged || only.Latest.WindowN != 0 {
		t.Errorf("a lone run without trials: %+v, want it not judged, with no trials", only.Latest)
	}
}
