package results

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// widthCases are text reports of every shape the reporters print: the
// golden runs (censored, interrupted, schema 1), the ClusterIP paths
// table, the startup section, and synthetic runs of 2 to 200 trials.
func widthCases(t *testing.T) map[string]*Summary {
	t.Helper()
	ms := time.Millisecond
	paths := NewSummary(nil, Options{})
	paths.Add(pathTrial(1, 3*time.Second, 1200*ms))
	paths.Add(pathTrial(2, 2*time.Second, 2500*ms))
	paths.Add(pathTrial(3, 4*time.Second, 1100*ms))
	paths.Close()
	startup := NewSummary(nil, Options{})
	for i, lag := range []time.Duration{400 * ms, 1200 * ms, 2800 * ms, 2000 * ms} {
		startup.Add(startupTrial(i+1, 3100*ms, 3150*ms, lag, map[string]int{"refused": i}))
	}
	startup.Close()
	cases := map[string]*Summary{
		"run": load(t, "run.jsonl"), "censored": load(t, "censored.jsonl"),
		"interrupted": load(t, "interrupted.jsonl"), "v1": load(t, "v1.jsonl"),
		"paths": paths, "startup": startup,
	}
	for _, n := range []int{2, 20, 200} {
		cases["synth-"+strings.Repeat("n", n/20+1)] = synthSummary(synthSpec{seed: 3, trials: n, poll: 3 * time.Second, hold: 2500 * ms})
	}
	return cases
}

// longest is the widest line of out in runes (what a terminal shows).
func longest(out string) (int, string) {
	w, line := 0, ""
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > w {
			w, line = n, l
		}
	}
	return w, line
}

// Every line of the default text report, and of compare's, fits a
// 100-column terminal; --wide (width 0) keeps the roomy layout, which is
// wider, so the check is one that can fail.
func TestTextReportsFit100Columns(t *testing.T) {
	wider := false
	for name, s := range widthCases(t) {
		var b bytes.Buffer
		if err := NewTextReporter(s)(&b); err != nil {
			t.Fatal(err)
		}
		if w, line := longest(b.String()); w > TextWidth {
			t.Errorf("%s: a line of %d columns:\n%s", name, w, line)
		}
		b.Reset()
		if err := NewTextReporterWidth(s, 0)(&b); err != nil {
			t.Fatal(err)
		}
		if w, _ := longest(b.String()); w > TextWidth {
			wider = true
		}
	}
	if !wider {
		t.Error("no wide report is wider than 100 columns: the width check checks nothing")
	}
	cmp := Compare(load(t, "baseline.jsonl"), load(t, "run.jsonl"), CompareOptions{})
	var b bytes.Buffer
	if err := NewCompareTextReporter(cmp)(&b); err != nil {
		t.Fatal(err)
	}
	if w, line := longest(b.String()); w > TextWidth {
		t.Errorf("compare: a line of %d columns:\n%s", w, line)
	}
}

// layoutTable keeps the roomy widths when they fit, narrows the numbers
// then the names when not, and moves a name too long for what is left to
// a line of its own.
func TestLayoutTable(t *testing.T) {
	cols := []column{{head: "stage", left: true, roomy: 10}, {head: "p50", roomy: 6, group: 1}, {head: "max", roomy: 6, group: 1}}
	rows := [][]string{{"a_long_stage_name", "1.0s", "12.0s"}, {"short", "0.5s", "0.7s"}}
	for _, tc := range []struct {
		width int
		want  []string
	}{
		{0, []string{
			"stage                p50    max",
			"a_long_stage_name   1.0s  12.0s",
			"short               0.5s   0.7s"}},
		{29, []string{
			"stage               p50   max",
			"a_long_stage_name  1.0s 12.0s",
			"short              0.5s  0.7s"}},
		{20, []string{
			"stage      p50   max",
			"a_long_stage_name",
			"          1.0s 12.0s",
			"short     0.5s  0.7s"}},
	} {
		got := layoutTable(cols, rows, tc.width, " ")
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("width %d:\n%s\nwant\n%s", tc.width, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}
