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

// Two real runs, Skipper polling every 1 s and then every 4 s: compare
// calls the window worse, and the reason is a test that fires with room to
// spare (the tail test at a tenth of its share of the family error, or the
// median's interval clear of 0), not a borderline draw; the upstream stage
// the poll delays is worse too, the EndpointSlice stage it does not touch
// is not. --max-regression 20% exits 3 naming the window.
func TestComparePollRegression(t *testing.T) {
	text, stderr, code := epwindow(t, "compare", base.path, slow.path)
	if code != 0 {
		t.Fatalf("compare exited %d; stderr:\n%s", code, stderr)
	}
	t.Logf("epwindow compare (Skipper poll %s → %s):\n%s", base.poll, slow.poll, text)
	c, stderr, code := compareJSON(t, base.path, slow.path, "--max-regression", "20%")
	m, ok := c.Metric(results.PointWindow)
	if !ok {
		t.Fatalf("no window in the comparison (metrics: %s)", metricNames(c))
	}
	tailFires := m.Tail != nil && m.Tail.Significant && m.Tail.Relevant && m.Tail.P <= m.Tail.Alpha/10
	medianFires := len(m.Changes) > 0 && m.Changes[0].Judged && m.Changes[0].CILoNS > 0 && m.Changes[0].Relevant
	if m.Verdict != results.Worse || !(tailFires || medianFires) {
		t.Errorf("window: verdict %q, tail %+v; want worse by a test with room to spare\n%s", m.Verdict, m.Tail, describe(m))
	}
	if u, _ := c.Metric(results.StageUpstreamRemoved); u.Verdict != results.Worse {
		t.Errorf("upstream_removed: verdict %q, want worse (the poll delays it)\n%s", u.Verdict, describe(u))
	}
	if s, _ := c.Metric(results.StageSliceNotReady); s.Verdict == results.Worse {
		t.Errorf("slice_not_ready: worse, but the poll does not reach it\n%s", describe(s))
	}
	if code != 3 || !strings.Contains(stderr, "max-regression: window:") {
		t.Errorf("compare --max-regression 20%%: exit %d, want 3 naming window; stderr:\n%s", code, stderr)
	}
}
