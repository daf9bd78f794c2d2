package results

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// HistoryRows is how many of the newest segment's run tests the text
// report lists (the newest ones): a history grows by four runs a day.
const HistoryRows = 20

// runSpan names runs idx of d: "run-003.jsonl" or "run-003.jsonl … run-009.jsonl (7)".
func (d *Drift) runSpan(idx []int) string {
	switch len(idx) {
	case 0:
		return "none"
	case 1:
		return d.Runs[idx[0]].Name
	}
	return fmt.Sprintf("%s … %s (%d)", d.Runs[idx[0]].Name, d.Runs[idx[len(idx)-1]].Name, len(idx))
}

// verdictText is a run test's verdict in words.
func (v RunVerdict) verdictText() string {
	switch {
	case v.Verdict == NotJudged && v.Need > 0:
		return fmt.Sprintf("not judged: the baseline needs %d trials more", v.Need)
	case v.Verdict == NotJudged:
		return "not judged"
	}
	return string(v.Verdict)
}

// describe is a run test's verdict with what it rests on, in words.
func (d *Drift) describe(v RunVerdict) string {
	switch v.Verdict {
	case NotJudged:
		return v.verdictText()
	case Suspect:
		if v.Run == v.ChangeRun {
			return fmt.Sprintf("suspect: the newest %d trials against %d of the reference; the trials after this run confirm it or clear it", v.WindowN, v.BaselineN)
		}
		return fmt.Sprintf("suspect since %s: confirming on the %d trials after it, against %d reference trials the screen did not read", d.Runs[v.ChangeRun].Name, v.WindowN, v.BaselineN)
	case Worse:
		s := fmt.Sprintf("worse: seen at %s, confirmed at %s on the trials after it; the baseline (%d trials) held before the change",
			d.Runs[v.ChangeRun].Name, d.Runs[v.Confirmed].Name, v.BaselineN)
		if v.ReleaseNeed > 0 {
			s += fmt.Sprintf(" until %d trials after the confirmation are like it (%d more)", v.WindowN+v.ReleaseNeed, v.ReleaseNeed)
		}
		return s
	}
	s := fmt.Sprintf("%s: the newest %d trials against %d of the reference", v.Verdict, v.WindowN, v.BaselineN)
	switch {
	case v.Cleared:
		s += fmt.Sprintf("; the suspicion of %s cleared: the trials after it were like the reference", d.Runs[v.ChangeRun].Name)
	case v.Released:
		s += "; the held change released: the trials after it are like the baseline again"
	}
	return s
}

// NewDriftTextReporter renders a history's drift: its segments and what
// changed between them, the newest segment's run tests (the newest
// HistoryRows), and the newest run's comparison of the window, fitting
// width columns (<= 0: TextWidth).
func NewDriftTextReporter(d *Drift, width int) Reporter {
	if width <= 0 {
		width = TextWidth
	}
	return func(w io.Writer) error {
		e := &errWriter{w: w}
		e.printf("history: %d runs, %d segment(s) of unchanged settings\n", len(d.Runs), len(d.Segments))
		for i, s := range d.Segments {
			idx := make([]int, 0, s.Last-s.First+1)
			for k := s.First; k <= s.Last; k++ {
				idx = append(idx, k)
			}
			e.printf("  segment %d: %s\n", i+1, d.runSpan(idx))
			for _, ch := range s.Changes {
				for j, l := range wrap(strings.Fields(ch), " ", width-6) {
					if j == 0 {
						e.printf("    changed: %s\n", l)
					} else {
						e.printf("      %s\n", l)
					}
				}
			}
		}
		if len(d.Tests) == 0 {
			return e.err
		}
		e.printf("\nthe newest segment's runs, each against its baseline (window metric):\n")
		tests := d.Tests
		if len(tests) > HistoryRows {
			e.printf("  (%d earlier runs not shown)\n", len(tests)-HistoryRows)
			tests = tests[len(tests)-HistoryRows:]
		}
		for _, v := range tests {
			e.printf("  %s: window %d trials of %s; baseline %d trials of %s\n    %s\n",
				d.Runs[v.Run].Name, v.WindowN, d.runSpan(v.Window), v.BaselineN, d.runSpan(v.Baseline), d.describe(v))
		}
		l := d.Latest
		e.printf("\nnewest run %s: window %s\n", d.Runs[l.Run].Name, d.describe(l))
		if d.Comparison == nil {
			return e.err
		}
		// The window's block of the comparison, with its legend.
		c := *d.Comparison
		c.Metrics = nil
		if m, ok := d.Comparison.Metric(PointWindow); ok {
			c.Metrics = []MetricChange{m}
		}
		e.printf("\n")
		if e.err == nil {
			e.err = NewCompareTextReporterWidth(&c, width)(w)
		}
		return e.err
	}
}

// driftDoc is the JSON form of a Drift: runs by name.
type driftDoc struct {
	Runs     []string     `json:"runs"`
	Segments []segmentDoc `json:"segments"`
	Tests    []RunVerdict `json:"tests"`
	Latest   RunVerdict   `json:"latest"`
	// Comparison is the newest run's (absent when not judged).
	Comparison *Comparison `json:"comparison,omitempty"`
}

type segmentDoc struct {
	First    int      `json:"first"`
	Last     int      `json:"last"`
	Settings Settings `json:"settings"`
	Changes  []string `json:"changes,omitempty"`
}

// NewDriftJSONReporter renders a history's drift as indented JSON.
func NewDriftJSONReporter(d *Drift) Reporter {
	return func(w io.Writer) error {
		doc := driftDoc{Tests: d.Tests, Latest: d.Latest, Comparison: d.Comparison}
		for _, r := range d.Runs {
			doc.Runs = append(doc.Runs, r.Name)
		}
		for _, s := range d.Segments {
			doc.Segments = append(doc.Segments, segmentDoc(s))
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
}
