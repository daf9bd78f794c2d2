package results

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	if l.Verdict != NotJudged || l.BaselineN != 50 || l.Need != DefaultBaselineTrials-50 || d.Comparison != nil {
		t.Errorf("latest %+v: want not judged, the new segment's 50 trials filling its reference, needing %d more", l, DefaultBaselineTrials-50)
	}
	for _, i := range append(l.Baseline, l.Window...) {
		if i < 15 {
			t.Errorf("run %d of the old settings pooled after the change", i)
		}
	}
}

// monthRuns is a month of a default schedule: 4 runs a day of 10 trials
// for 33 days, the first 12 filling the first reference, 120 judged.
const monthRuns = 132

// runTest is one judged run of a simulated history, kept small: a month's
// files themselves would take gigabytes over hundreds of histories.
type runTest struct {
	run      int
	verdict  Verdict
	released bool
}

// monthHistories replays h month-long histories (seeds from seed), the
// slow mode (+30 s) in pSlow of deletions from run onset on (onset < 0:
// never), across the machine's cores, and returns each one's run tests.
func monthHistories(seed uint64, h, onset int, pSlow float64) [][]runTest {
	out := make([][]runTest, h)
	onEveryCPU(h, func(k int) {
		var hist []HistoryRun
		for i := range monthRuns {
			p := 0.0
			if onset >= 0 && i >= onset {
				p = pSlow
			}
			hist = append(hist, historyRun(seed+uint64(1000*k+i), i, p, "v1.37.2"))
		}
		for _, v := range DriftOf(hist, DriftOptions{}).Tests {
			if v.Verdict != NotJudged {
				out[k] = append(out[k], runTest{v.Run, v.Verdict, v.Released})
			}
		}
	})
	return out
}

// No change for a month: 300 histories of the default schedule and sizes.
// The alert (EpwindowWindowWorse) fires on a run judged worse; a history
// has a false alarm when any of its 120 judged runs is. A false alarm
// needs a screen (about one a month, at its 2.5%) and then a confirmation
// on trials disjoint from everything the screen read, on both sides
// (DriftConfirmAlpha: 2.5%), so the monthly rate is about their product,
// about 2%; the bound is 5%, and the test holds the upper end of
// the exact 95% interval to it. Each false alarm's hold is released once a
// release window like the baseline follows: the run tests called worse
// are few, not the tail of a month.
func TestDriftFalseAlarms(t *testing.T) {
	const histories = 300
	hists := monthHistories(1_000_000, histories, -1, 0)
	alarmed, worse, judged, released := 0, 0, 0, 0
	for _, h := range hists {
		hit, rel := false, false
		for _, v := range h {
			judged++
			if v.verdict == Worse {
				worse++
				hit = true
			}
			rel = rel || v.released
		}
		if hit {
			alarmed++
			if rel {
				released++
			}
		}
	}
	lo, hi := clopperPearson(alarmed, histories)
	rlo, rhi := clopperPearson(worse, judged)
	t.Logf("no change, %d month-long histories (132 runs of 10 trials, 4 a day): %d alarmed (%.1f%%, 95%% interval %.1f–%.1f%%), %d of them released within the month; %d of %d judged runs worse (%.2f%%, %.2f–%.2f%%)",
		histories, alarmed, 100*float64(alarmed)/histories, 100*lo, 100*hi, released, worse, judged, 100*float64(worse)/float64(judged), 100*rlo, 100*rhi)
	if hi > 0.05 {
		t.Errorf("%d of %d months of no change alarmed: the 95%% interval reaches %.1f%%, above the 5%% a month the drift test promises", alarmed, histories, 100*hi)
	}
	if worse > 0 && rhi > 0.01 {
		t.Errorf("%d of %d judged runs of no change called worse (up to %.2f%%): false alarms are held too long", worse, judged, 100*rhi)
	}
}

// A controller upgrade that makes 10% of deletions 30 s slower, ten days
// into a month (run 40, once the reference has grown to three baselines):
// 200 histories. It is caught within the month in nearly all of them, the
// delay (in runs of 10 trials from the first slowed one to the first run
// judged worse) is printed as median and 90th percentile, and once caught
// it stays caught: the runs after it are still worse (the baseline held
// before the change) instead of becoming the new normal.
func TestDriftCatchesSlowMode(t *testing.T) {
	const histories, onset = 200, 40
	hists := monthHistories(2_000_000, histories, onset, 0.10)
	var delays []int
	after, afterWorse := 0, 0
	for _, h := range hists {
		first := -1
		for _, v := range h {
			if v.run < onset {
				continue
			}
			if first < 0 && v.verdict == Worse {
				first = v.run
				delays = append(delays, v.run-onset+1)
			}
			if first >= 0 && v.run > first {
				after++
				if v.verdict == Worse {
					afterWorse++
				}
			}
		}
	}
	slices.Sort(delays)
	lo, hi := clopperPearson(len(delays), histories)
	if len(delays) == 0 {
		t.Fatalf("a 10%% slow mode never caught in %d histories", histories)
	}
	med, p90 := delays[(len(delays)-1)/2], delays[int(math.Ceil(0.9*float64(len(delays))))-1]
	t.Logf("+30 s in 10%% of deletions from run %d: caught within the month in %d of %d histories (95%% interval %.1f–%.1f%%); runs until caught: median %d, 90th percentile %d, longest %d; %d of the %d runs after it still worse",
		onset, len(delays), histories, 100*lo, 100*hi, med, p90, delays[len(delays)-1], afterWorse, after)
	if lo < 0.9 {
		t.Errorf("the slow mode caught in %d of %d histories: want ≥ 90%% (lower end of the interval)", len(delays), histories)
	}
	if med > 16 || p90 > 32 {
		t.Errorf("runs until caught: median %d, 90th percentile %d; want within 4 and 8 days at 4 runs a day", med, p90)
	}
	if afterWorse < after*9/10 {
		t.Errorf("only %d of the %d runs after the change was caught were still worse: the change was absorbed", afterWorse, after)
	}
}

// The report's words for a run not judged say what is missing.
func TestDriftNeedSaysHowMany(t *testing.T) {
	runs := []HistoryRun{historyRun(1, 0, 0, "v1"), historyRun(2, 1, 0, "v1")}
	d := DriftOf(runs, DriftOptions{})
	if d.Latest.Need != DefaultBaselineTrials-20 || d.Latest.Run != 1 || !slices.Equal(d.Latest.Baseline, []int{0, 1}) {
		t.Errorf("latest %+v: want runs 0 and 1 filling the reference, %d trials short", d.Latest, DefaultBaselineTrials-20)
	}
	if txt := d.Latest.verdictText(); !strings.Contains(txt, fmt.Sprint(DefaultBaselineTrials-20)) {
		t.Errorf("verdict %q does not say how many trials the baseline needs", txt)
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
	if d.Latest.Run != 1 || d.Latest.WindowP50NS <= 0 || !slices.Equal(d.Latest.Recent, []int{0, 1}) {
		t.Errorf("latest %+v: want run 1, the newest with trials, and its window", d.Latest)
	}
	for _, v := range d.Tests {
		if v.Run == 2 {
			t.Errorf("run 2, without trials, was tested: %+v", v)
		}
	}
	// A history whose newest segment has no trial at all still says so.
	only := DriftOf([]HistoryRun{started}, DriftOptions{})
	if only.Latest.Run != 0 || only.Latest.Verdict != NotJudged || only.Latest.BaselineN != 0 {
		t.Errorf("a lone run without trials: %+v, want it not judged, with no trials", only.Latest)
	}
}

// Settings are what the operator configures: a DNS cache's answers (the
// TTLs a run saw) never split a history, while kube-proxy's mode and sync
// periods, an observer without a poll interval, and a change of route kind
// from an older file's implicit Ingress do, each named.
func TestSettingsSplitOnlyOnWhatIsConfigured(t *testing.T) {
	withDNS := func(i int, ttl, seen string) HistoryRun {
		r := historyRun(uint64(i), i, 0, "v1.37.2")
		h := *r.File.Header
		settings := map[string]string{"name": "probe.epwindow.svc.cluster.local", "ttl": ttl}
		if seen != "" {
			settings["ttl_seen"] = seen
		}
		h.Observers = append(slices.Clone(h.Observers), Observer{Name: DNSObserver, Settings: settings})
		r.File.Header = &h
		return r
	}
	cached := DriftOf([]HistoryRun{
		withDNS(0, "30s", ""), withDNS(1, "30s", "3s–30s (answered from a cache)"), withDNS(2, "27s", "1s–27s (answered from a cache)"),
	}, DriftOptions{})
	if len(cached.Segments) != 1 {
		t.Errorf("runs differing only in the TTLs a cache answered: %d segments %+v, want one", len(cached.Segments), cached.Segments)
	}

	base := historyRun(1, 0, 0, "v1.37.2")
	edit := func(i int, f func(h *Header)) HistoryRun {
		r := historyRun(uint64(10+i), i, 0, "v1.37.2")
		h := *r.File.Header
		f(&h)
		r.File.Header = &h
		return r
	}
	for _, tc := range []struct {
		name string
		f    func(h *Header)
		want string
	}{
		{"kube-proxy mode", func(h *Header) { h.KubeProxy = &KubeProxy{Mode: "iptables"} }, "kube_proxy.mode: (none) → iptables"},
		{"kube-proxy sync period", func(h *Header) { h.KubeProxy = &KubeProxy{MinSyncPeriodNS: int64(time.Second)} }, "kube_proxy.min_sync_period: (none) → 1.000s"},
		{"observer without an interval", func(h *Header) {
			h.Observers = append(slices.Clone(h.Observers), Observer{Name: DNSObserver})
		}, "observer.dns: (none) → on"},
		{"route kind", func(h *Header) { h.Route = Route{Kind: RouteKindHTTPRoute, Controller: "example.net/gateway"} }, "route.kind: Ingress → HTTPRoute"},
	} {
		b := base
		hb := *b.File.Header
		hb.Route = Route{} // an older file: no route recorded
		b.File = &File{Format: b.File.Format, Header: &hb, Trials: b.File.Trials}
		d := DriftOf([]HistoryRun{b, edit(1, tc.f)}, DriftOptions{})
		if len(d.Segments) != 2 || !slices.Contains(d.Segments[1].Changes, tc.want) {
			t.Errorf("%s: segments %+v, want a split naming %q", tc.name, d.Segments, tc.want)
		}
	}
}

// windowTest is the drift test's fast path for Compare's window verdict:
// on pairs of runs of every kind (like runs, a shift, a slow mode, trials
// cut at the hold) it gives the verdict Compare gives the window at the
// window's share of the family error.
func TestWindowTestIsComparesVerdict(t *testing.T) {
	agree := 0
	for k := range 60 {
		pSlow := []float64{0, 0.1, 0.3}[k%3]
		n0, n1 := 20+10*(k%4), 20+10*((k/4)%4)
		base := windowRun(uint64(500+k), n0, lognormal, 0, 0)
		next := windowRun(uint64(900+k), n1, lognormal, pSlow, 30*time.Second)
		c := Compare(base, next, CompareOptions{})
		m, _ := c.Metric(PointWindow)
		got := windowTest(base.samples[PointWindow], next.samples[PointWindow], c.WindowAlpha, CompareOptions{MinChange: DefaultMinChange, MinChangeRel: DefaultMinChangeRel})
		if got != m.Verdict {
			t.Errorf("pair %d (%d vs %d trials, slow %.0f%%): windowTest %s, Compare %s", k, n0, n1, 100*pSlow, got, m.Verdict)
			continue
		}
		agree++
	}
	t.Logf("%d of 60 pairs agree", agree)
}

// A regression that goes away is released: a slow mode in 30% of
// deletions for runs 40–59 is confirmed worse, held while it lasts, and
// released once a release window after it is like the baseline; the runs
// after the release are judged afresh, not held for ever.
func TestDriftReleasesAHoldThatWentAway(t *testing.T) {
	var runs []HistoryRun
	for i := range monthRuns {
		p := 0.0
		if i >= 40 && i < 60 {
			p = 0.3
		}
		runs = append(runs, historyRun(uint64(3_000_000+i), i, p, "v1.37.2"))
	}
	d := DriftOf(runs, DriftOptions{})
	confirmed, released := -1, -1
	for _, v := range d.Tests {
		switch {
		case v.Verdict == Worse && confirmed < 0:
			confirmed = v.Run
		case v.Released:
			released = v.Run
		}
	}
	if confirmed < 40 || confirmed >= 60 {
		t.Fatalf("confirmed worse at run %d, want during the slow mode (runs 40–59)", confirmed)
	}
	if released < 60+DefaultWindowTrials/10 {
		t.Fatalf("released at run %d, want once a whole release window after the slow mode (run %d or later) was like the baseline", released, 60+DefaultWindowTrials/10)
	}
	for _, v := range d.Tests {
		if v.Run > confirmed && v.Run < 60 && v.Verdict != Worse {
			t.Errorf("run %d, during the slow mode after its confirmation: %s, want worse (held)", v.Run, v.Verdict)
		}
		if v.Run > released && (v.Verdict == Worse || v.Frozen) {
			t.Errorf("run %d after the release: %+v, want judged afresh", v.Run, v)
		}
	}
	t.Logf("confirmed at run %d, released at run %d", confirmed, released)
}

// Retention keeps what the judgement rests on: a history holding a
// confirmed regression, pruned to its newest runs, would take the
// regression for the reference and call it same; HistoryNeeds names the
// runs to keep, and pruned around them the newest run is still worse.
func TestRetentionKeepsAHeldRegression(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var runs []HistoryRun
	for i := range 60 {
		p := 0.0
		if i >= 36 {
			p = 0.3
		}
		r := historyRun(uint64(4_000_000+i), i, p, "v1.37.2")
		r.File.Header.StartedAt = start.Add(time.Duration(i) * 6 * time.Hour)
		r.Name = RunFileName(r.File.Header.StartedAt)
		runs = append(runs, r)
		var b bytes.Buffer
		w := NewWriter(&b)
		if err := w.WriteHeader(r.File.Header); err != nil {
			t.Fatal(err)
		}
		for k := range r.File.Trials {
			if err := w.WriteTrial(&r.File.Trials[k]); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, r.Name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if d := DriftOf(runs, DriftOptions{}); d.Latest.Verdict != Worse {
		t.Fatalf("the whole history: newest run %s, want worse", d.Latest.Verdict)
	}
	keep := Retention{KeepRuns: 20}
	now := start.Add(60 * 6 * time.Hour)
	current := RunFileName(now)
	// Without the needs: the regression becomes the reference.
	var newest []HistoryRun
	for _, r := range runs {
		if !slices.Contains(keep.Expired(names(runs), current, now), r.Name) {
			newest = append(newest, r)
		}
	}
	if d := DriftOf(newest, DriftOptions{}); d.Latest.Verdict == Worse {
		t.Fatalf("the newest %d runs alone are still worse: the test shows nothing", len(newest))
	}
	needs, err := HistoryNeeds(dir, DriftOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keep.Prune(dir, current, now, needs...); err != nil {
		t.Fatal(err)
	}
	var left []HistoryRun
	for _, r := range runs {
		if _, err := os.Stat(filepath.Join(dir, r.Name)); err == nil {
			left = append(left, r)
		}
	}
	if len(left) >= len(runs) {
		t.Fatalf("nothing pruned (%d runs left): the test shows nothing", len(left))
	}
	if d := DriftOf(left, DriftOptions{}); d.Latest.Verdict != Worse {
		t.Errorf("pruned to %d runs keeping %d needed ones: newest run %s, want still worse", len(left), len(needs), d.Latest.Verdict)
	}
}

func names(runs []HistoryRun) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Name)
	}
	return out
}

// The same run twice (a copied file) is pooled once: one run with one
// slow trial in ten is the same as its baseline, and twelve copies of it
// are still that one run, not a slow mode.
func TestDriftPoolsACopiedRunOnce(t *testing.T) {
	var runs []HistoryRun
	for i := range 24 {
		runs = append(runs, historyRun(uint64(5_000_000+i), i, 0, "v1.37.2"))
	}
	slow := historyRun(5_100_000, 24, 0, "v1.37.2")
	slow.File.Trials[3] = runs[0].File.Trials[3]
	for k := range slow.File.Trials[3].Stages {
		st := &slow.File.Trials[3].Stages[k]
		if st.Name == StageLastRequest || st.Name == StageLastAccept {
			st.OffsetNS += int64(30 * time.Second)
			st.At = st.At.Add(30 * time.Second)
		}
	}
	one := DriftOf(append(slices.Clone(runs), slow), DriftOptions{})
	copies := slices.Clone(runs)
	for k := range 12 {
		c := slow
		c.Name = fmt.Sprintf("copy-%02d.jsonl", k)
		copies = append(copies, c)
	}
	many := DriftOf(copies, DriftOptions{})
	if len(many.Runs) != len(runs)+1 || many.Latest.Verdict != one.Latest.Verdict || many.Latest.Verdict == Worse {
		t.Errorf("twelve copies of a run: %d runs pooled, verdict %s; the run once: %s; want it pooled once, not worse", len(many.Runs), many.Latest.Verdict, one.Latest.Verdict)
	}
}

// Each run test's own figures (the covered duration's bound and the
// window's median over its Recent runs) are what a Summary of those runs
// computes: DriftOf takes them from the samples alone, for speed.
func TestDriftFiguresAreTheSummarys(t *testing.T) {
	var runs []HistoryRun
	for i := range 30 {
		// Full trials (preStop, SIGTERM, the probe's stages), some cut at
		// a 4 s hold.
		spec := synthSpec{seed: uint64(6_000_000 + i), trials: 10, poll: 3 * time.Second, hold: 4 * time.Second}
		h := synthHeader(spec)
		h.StartedAt = synthStart.Add(time.Duration(i) * 6 * time.Hour)
		runs = append(runs, HistoryRun{Name: fmt.Sprintf("run-%03d.jsonl", i), File: &File{Header: h, Trials: synthTrials(spec)}})
	}
	d := DriftOf(runs, DriftOptions{})
	floors := 0
	for _, v := range d.Tests {
		s := pooled(d.Runs, v.Recent)
		rec := s.Doc().Recommendation
		w, _ := s.Dist(PointWindow)
		if v.BoundFloor {
			floors++
		}
		if rec == nil || rec.CoverNS != v.BoundNS || rec.Bound.Covers != v.BoundCovers || rec.Bound.LowerBound != v.BoundFloor || w.P50NS != v.WindowP50NS {
			t.Errorf("run %d: bound %d covers %g floor %v p50 %d; the Summary's %+v and p50 %d", v.Run, v.BoundNS, v.BoundCovers, v.BoundFloor, v.WindowP50NS, rec, w.P50NS)
		}
	}
	t.Logf("%d run tests, %d of them with a floor", len(d.Tests), floors)
}
