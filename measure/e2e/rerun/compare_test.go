package rerun

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/results"
)

// compareJSON runs `epwindow compare --format json` and decodes its verdicts.
func compareJSON(t *testing.T, baseline, next string, extra ...string) (*results.Comparison, string, int) {
	t.Helper()
	args := append([]string{"compare", "--format", "json"}, extra...)
	stdout, stderr, code := epwindow(t, append(args, baseline, next)...)
	var c results.Comparison
	if err := json.Unmarshal([]byte(stdout), &c); err != nil {
		t.Fatalf("compare --format json output does not decode: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	return &c, stderr, code
}

// compare on a real results file: the run against itself is the same in
// every metric it measured (identical samples: no difference can be
// significant or relevant), the 1 s cross-check is never judged, the JSON
// names every metric, and the gates' exit codes hold — --max-regression
// passes when nothing got worse, --max-p99 below the measured
// upstream_removed exits 3 and names it.
func TestCompareRealRun(t *testing.T) {
	logP50s(t)
	text, stderr, code := epwindow(t, "compare", base.path, base.path)
	if code != 0 {
		t.Fatalf("compare without thresholds exited %d, want 0; stderr:\n%s", code, stderr)
	}
	t.Logf("epwindow compare (the run against itself):\n%s", text)

	c, stderr, code := compareJSON(t, base.path, base.path, "--max-regression", "20%")
	if code != 0 {
		t.Fatalf("compare --format json --max-regression 20%% of a run with itself exited %d, want 0; stderr:\n%s", code, stderr)
	}
	for _, name := range []string{results.StageSliceNotReady, results.StageUpstreamRemoved, results.PointWindow} {
		if _, ok := c.Metric(name); !ok {
			t.Errorf("%s: not in the comparison (metrics: %s)", name, metricNames(c))
		}
	}
	for _, m := range c.Metrics {
		want := results.Same
		if m.Metric == results.StageServerDeleteTime || m.NBase == 0 {
			want = results.NotJudged
		}
		if m.Verdict != want {
			t.Errorf("%s compared with itself: verdict %q, want %q\n%s", m.Metric, m.Verdict, want, describe(m))
		}
	}

	t.Run("max-p99 breached", func(t *testing.T) {
		// Exit 3 (README "Exit codes"): Skipper polls every second, so no
		// trial's address leaves its table within a millisecond.
		_, stderr, code := epwindow(t, "compare", "--max-p99", results.StageUpstreamRemoved+"=1ms", base.path, base.path)
		if code != 3 {
			t.Errorf("compare --max-p99 %s=1ms exited %d, want 3; stderr:\n%s", results.StageUpstreamRemoved, code, stderr)
		}
		if want := "max-p99: " + results.StageUpstreamRemoved + ":"; !strings.Contains(stderr, want) {
			t.Errorf("breach report does not name %q:\n%s", want, stderr)
		}
	})
}

// logP50s logs each stage's p50 in the run, from report --format json.
func logP50s(t *testing.T) {
	t.Helper()
	out, stderr, code := epwindow(t, "report", "--format", "json", base.path)
	if code != 0 {
		t.Fatalf("report --format json %s exited %d; stderr:\n%s", base.path, code, stderr)
	}
	var doc results.JSONReport
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("report --format json %s: %v", base.path, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %12s\n", "p50 (n)", "poll "+base.poll.String())
	a := doc.Summary
	for _, d := range append(slices.Clone(a.Stages), a.Deltas...) {
		p50 := "-"
		if d.N > 0 {
			p50 = fmt.Sprintf("%s (%d)", time.Duration(d.P50NS).Round(time.Millisecond), d.N)
		}
		fmt.Fprintf(&b, "%-40s %12s\n", d.Name, p50)
	}
	fmt.Fprintf(&b, "valid trials: %d of %d", a.Valid, a.Trials)
	t.Logf("\n%s", b.String())
}

func metricNames(c *results.Comparison) string {
	var out []string
	for _, m := range c.Metrics {
		out = append(out, m.Metric)
	}
	return strings.Join(out, ", ")
}

// describe renders a metric's changes for a failure message.
func describe(m results.MetricChange) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  n %d → %d", m.NBase, m.NNew)
	for _, q := range m.Changes {
		fmt.Fprintf(&b, "\n  p%g: %s → %s (Δ %s, CI [%s, %s], significant %t, relevant %t, judged %t)", q.Quantile*100,
			time.Duration(q.BaseNS), time.Duration(q.NewNS), time.Duration(q.DiffNS), time.Duration(q.CILoNS), time.Duration(q.CIHiNS),
			q.Significant, q.Relevant, q.Judged)
	}
	return b.String()
}
