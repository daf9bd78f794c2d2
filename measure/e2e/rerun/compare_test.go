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

// What --ingress-poll changes, and what it cannot.
//
// Skipper reloads its route table by sleeping its poll interval between two
// loads of the API (routing/datasource.go, receiveFromClient), and only a
// load drops a terminating endpoint. measure pauses before each deletion
// for a stratified random part of --trial-jitter (3 s, a whole number of
// both poll cycles), so the deletions meet every phase of the cycle and the
// address leaves the table uniformly within one poll interval of the
// slice's change: p50 ≈ 0.5 s with 1 s polls, ≈ 1.5 s with 3 s polls. That
// 1 s shift is far above compare's relevance floor (max(50 ms, 10% of the
// baseline)), and it moves everything that waits for the ingress: the
// previous poll that still listed the address, the last request it
// forwarded, the window, and (through measure's release, a quiet period
// after the traffic ends) the container's exit, the pod's deletion and the
// address's removal from the slice.
//
// The EndpointSlice controller, the kubelet-side node agent and the API
// server never read Skipper: the deletion's acknowledgement, the pod watch,
// the slice's ready/serving flips, the preStop call and SIGTERM are the same
// processes doing the same work in both clusters.
var (
	// wantWorse must be judged worse with --ingress-poll 3s against 1s.
	wantWorse = []string{
		results.StageUpstreamLastSeen,
		results.StageUpstreamRemoved,
		results.StageLastRequest,
		results.PointWindow,
		results.Delta{From: results.StageSliceNotReady, To: results.StageUpstreamRemoved}.Name(),
		results.Delta{From: results.StageSliceNotReady, To: results.PointWindow}.Name(),
		results.Delta{From: results.StagePrestopCalled, To: results.PointWindow}.Name(),
		results.Delta{From: results.StageSigterm, To: results.PointWindow}.Name(),
		// After the release, which follows the traffic's end.
		results.StageContainerExit,
		results.StagePodDeleted,
		results.StageSliceRemoved,
	}
	// wantSame must be judged the same: the EndpointSlice stages before the
	// release, and the API-server and node paths.
	wantSame = []string{
		results.StageDeleteAcked,
		results.StagePodTerminatingSeen,
		results.StageSliceNotReady,
		results.StageSliceNotServing,
		results.StagePrestopCalled,
		results.StageSigterm,
		results.Delta{From: results.StagePodTerminatingSeen, To: results.StagePrestopCalled}.Name(),
		results.Delta{From: results.StagePrestopCalled, To: results.StageSigterm}.Name(),
	}
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

// Issue 6's done criterion: compare of two local runs with different
// --ingress-poll flags a regression in the upstream stage and the stages
// that follow it, and none in the EndpointSlice stages; --max-regression
// turns it into exit code 3.
func TestCompareIngressPoll(t *testing.T) {
	known := results.KnownMetrics()
	for _, m := range append(slices.Clone(wantWorse), wantSame...) {
		if !slices.Contains(known, m) {
			t.Fatalf("metric %q is not in results.KnownMetrics() %v: the test's expectations need updating", m, known)
		}
	}
	logP50s(t)

	// The table as a person reads it, kept in the log.
	text, stderr, code := epwindow(t, "compare", base.path, slow.path)
	if code != 0 {
		t.Fatalf("compare without thresholds exited %d, want 0; stderr:\n%s", code, stderr)
	}
	t.Logf("epwindow compare (--ingress-poll %s → %s):\n%s", base.poll, slow.poll, text)

	c, stderr, code := compareJSON(t, base.path, slow.path)
	if code != 0 {
		t.Fatalf("compare --format json exited %d, want 0; stderr:\n%s", code, stderr)
	}
	verdict := func(name string) (results.MetricChange, bool) {
		m, ok := c.Metric(name)
		if !ok {
			t.Errorf("%s: not in the comparison (metrics: %s)", name, metricNames(c))
		}
		return m, ok
	}
	for _, name := range wantWorse {
		if m, ok := verdict(name); ok && m.Verdict != results.Worse {
			t.Errorf("%s: verdict %q, want %q with Skipper polling %s instead of %s\n%s", name, m.Verdict, results.Worse, slow.poll, base.poll, describe(m))
		}
	}
	for _, name := range wantSame {
		if m, ok := verdict(name); ok && m.Verdict != results.Same {
			t.Errorf("%s: verdict %q, want %q: Skipper's poll interval does not reach this stage\n%s", name, m.Verdict, results.Same, describe(m))
		}
	}
	if m, ok := verdict(results.StageServerDeleteTime); ok && m.Verdict != results.NotJudged {
		t.Errorf("%s: verdict %q, want %q (a 1 s cross-check is never judged)", m.Metric, m.Verdict, results.NotJudged)
	}

	t.Run("max-regression breached", func(t *testing.T) {
		// Exit 3 (README "Exit codes"): the upstream stage grew by far more
		// than 20% (~2 s on ~1 s), and the breach names it.
		_, stderr, code := epwindow(t, "compare", "--max-regression", "20%", base.path, slow.path)
		if code != 3 {
			t.Errorf("compare --max-regression 20%% exited %d, want 3; stderr:\n%s", code, stderr)
		}
		if want := "max-regression: " + results.StageUpstreamRemoved + ":"; !strings.Contains(stderr, want) {
			t.Errorf("breach report does not name %q:\n%s", want, stderr)
		}
	})

	t.Run("improvement does not breach", func(t *testing.T) {
		// The same runs the other way round: the 1 s run is better than the
		// 3 s baseline, which no regression threshold may fail on.
		rev, stderr, code := compareJSON(t, slow.path, base.path, "--max-regression", "20%")
		if code != 0 {
			t.Errorf("compare --max-regression 20%% of the faster run against the slower exited %d, want 0; stderr:\n%s", code, stderr)
		}
		if m, ok := rev.Metric(results.StageUpstreamRemoved); !ok || m.Verdict != results.Better {
			t.Errorf("%s: verdict %q, want %q\n%s", results.StageUpstreamRemoved, m.Verdict, results.Better, describe(m))
		}
		for _, m := range rev.Metrics {
			if m.Verdict == results.Worse {
				t.Errorf("%s: judged worse with the faster Skipper as the new run\n%s", m.Metric, describe(m))
			}
		}
	})
}

// logP50s logs each stage's p50 in both runs, from report --format json.
func logP50s(t *testing.T) {
	t.Helper()
	var docs [2]results.JSONReport
	for i, r := range []run{base, slow} {
		out, stderr, code := epwindow(t, "report", "--format", "json", r.path)
		if code != 0 {
			t.Fatalf("report --format json %s exited %d; stderr:\n%s", r.path, code, stderr)
		}
		if err := json.Unmarshal([]byte(out), &docs[i]); err != nil {
			t.Fatalf("report --format json %s: %v", r.path, err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %12s %12s\n", "p50 (n)", "poll "+base.poll.String(), "poll "+slow.poll.String())
	p50 := func(ds []results.Dist, name string) string {
		for _, d := range ds {
			if d.Name == name && d.N > 0 {
				return fmt.Sprintf("%s (%d)", time.Duration(d.P50NS).Round(time.Millisecond), d.N)
			}
		}
		return "-"
	}
	a, s := docs[0].Summary, docs[1].Summary
	da := append(slices.Clone(a.Stages), a.Deltas...)
	ds := append(slices.Clone(s.Stages), s.Deltas...)
	for _, d := range da {
		fmt.Fprintf(&b, "%-40s %12s %12s\n", d.Name, p50(da, d.Name), p50(ds, d.Name))
	}
	fmt.Fprintf(&b, "valid trials: %d of %d, %d of %d", a.Valid, a.Trials, s.Valid, s.Trials)
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
