package results

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func streamRecord(trial int, lastClose time.Duration, unclosed int, herd []int) *Record {
	first, last := int64(5*time.Millisecond), int64(lastClose)
	peak := 0
	for _, n := range herd {
		peak = max(peak, n)
	}
	return &Record{Kind: KindTrial, Trial: trial, Streams: &StreamTrial{
		Protocol: "websocket", Drain: "close-jittered=5s", Reconnect: "grpc-default",
		OpenAtSigterm: 10, Closed: 10 - unclosed, Unclosed: unclosed, Graceful: 10 - unclosed,
		CloseKinds:   map[string]int{"ws_close 1012": 10 - unclosed},
		ProbeEnds:    map[string]int64{"app_close": int64(10 - unclosed)},
		FirstCloseNS: &first, LastCloseNS: &last, Herd: herd, HerdPeak: peak,
		Reopened: map[string]int{"pod-b": 6, "pod-c": 4}, Failures: map[string]int{"status_502": 1},
		ReestablishNS: []int64{int64(time.Millisecond), int64(40 * time.Millisecond)},
	}}
}

func TestStreamSummaryBoundAndGrace(t *testing.T) {
	s := NewStreamSummary(0.5, 0.95)
	// 20 trials with last closes 4.0 s … 4.95 s: the bound of the median at
	// 95% is an order statistic well inside, not a plain maximum.
	for i := range 20 {
		r := streamRecord(i, 4*time.Second+time.Duration(i)*50*time.Millisecond, 0, []int{1, 2, 3, 2, 1, 1})
		// Two trials' closes were matched to the probe's records.
		switch i {
		case 0:
			r.Streams.ProbeMatched, r.Streams.CloseLagNS = 2, []int64{-int64(time.Millisecond), int64(3 * time.Millisecond)}
		case 1:
			r.Streams.ProbeMatched, r.Streams.CloseLagNS = 1, []int64{int64(12 * time.Millisecond)}
		}
		s.Add(r)
	}
	s.Add(&Record{Kind: KindTrial, Trial: 99}) // no streams: skipped
	s.Close()
	d, ok := s.Dist(MetricStreamLastClose)
	if !ok || d.N != 20 || d.Bound == nil {
		t.Fatalf("last-close dist %+v", d)
	}
	k, _ := UpperBoundRank(20, 0.5, 0.95)
	if want := int64(4*time.Second + time.Duration(k-1)*50*time.Millisecond); d.Bound.NS != want {
		t.Errorf("bound %d, want x(%d) = %d", d.Bound.NS, k, want)
	}
	g, lower, ok := s.StreamGrace(5*time.Second, 10*time.Second)
	if !ok || lower || g != 15*time.Second+time.Duration(d.Bound.NS) {
		t.Errorf("grace %s lower %v ok %v", g, lower, ok)
	}
	var b bytes.Buffer
	if err := NewStreamsReporter(s, 5*time.Second, 10*time.Second)(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Long-lived connections", "ws_close 1012 (graceful)", "app_close", "stream_last_close",
		"terminationGracePeriodSeconds ≥ 20", "re-opens landed on: pod-b 60%, pod-c 40%", "status_502 20", "reconnect herd",
		"3 of 200 closes matched to the probe's record of the stream; client − probe: median +3.0ms,", "from -1.0ms to +12.0ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
}

func TestStreamSummaryUnclosedIsLowerBound(t *testing.T) {
	s := NewStreamSummary(0.5, 0.95)
	for i := range 3 {
		r := streamRecord(i, time.Duration(i+1)*time.Second, 1, []int{10})
		// The survivors took at most 2+i re-opens in 100 ms cleanly.
		r.Streams.HerdCleanPeak = 2 + i
		s.Add(r)
	}
	s.Close()
	if _, lower, ok := s.StreamGrace(0, time.Second); !ok || !lower {
		t.Fatalf("grace with unclosed streams: lower %v ok %v, want a floor", lower, ok)
	}
	var b bytes.Buffer
	if err := NewStreamsReporter(s, 0, time.Second)(&b); err != nil {
		t.Fatal(err)
	}
	// J is sized from the most taken cleanly (4) for the 10 streams a pod
	// had.
	j, ok := SpreadFor(10, 4, HerdBin, SpreadConfidence)
	if !ok || j <= 0 {
		t.Fatalf("SpreadFor(10, 4) = %s, %v", j, ok)
	}
	for _, want := range []string{"≥ at least", "took up to 4 re-opens in one 100ms without a failure",
		"close-jittered=" + j.String() + ")", "at most 4 in any 100ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// Without a failed re-open the survivors took the whole herd: no spread is
// advised, whatever its peak.
// Re-opens over a dozen pods wrap to the terminal's width.
func TestStreamReopensWrap(t *testing.T) {
	s := NewStreamSummary(0.5, 0.95)
	r := streamRecord(0, time.Second, 0, []int{9, 1})
	r.Streams.Reopened = map[string]int{}
	for i := range 12 {
		r.Streams.Reopened[fmt.Sprintf("probe-695788f5d6-%05d", i)] = 10 + i
	}
	s.Add(r)
	s.Close()
	var b bytes.Buffer
	if err := NewStreamsReporter(s, 0, time.Second)(&b); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if len([]rune(line)) > TextWidth {
			t.Errorf("line of %d columns: %q", len([]rune(line)), line)
		}
		n += strings.Count(line, "probe-695788f5d6-")
	}
	if n != 12 || !strings.Contains(b.String(), "  re-opens landed on: probe-695788f5d6-00011 ") {
		t.Errorf("%d of 12 pods listed, or not from the busiest:\n%s", n, b.String())
	}
}

func TestStreamAdviceNoFailures(t *testing.T) {
	s := NewStreamSummary(0.5, 0.95)
	r := streamRecord(0, time.Second, 0, []int{9, 1})
	r.Streams.Failures, r.Streams.HerdCleanPeak = nil, 9
	s.Add(r)
	s.Close()
	if got := streamAdvice(s); !strings.Contains(got, "needs no spread") || strings.Contains(got, "close-jittered") {
		t.Errorf("advice:\n%s", got)
	}
}

// With failed re-opens the advice follows the survivors' clean peak: none
// (capacity unknown), or one too small for any spread up to 10 minutes
// (SpreadFor not ok): neither branch may claim a J or no need to spread.
func TestStreamAdviceFailureBranches(t *testing.T) {
	for _, tc := range []struct {
		clean int
		want  string
	}{
		{0, "the survivors' capacity\n    is unknown"},
		{1, "the survivors took only 1 re-opens in one 100ms without a failure"},
	} {
		s := NewStreamSummary(0.5, 0.95)
		r := streamRecord(0, time.Second, 0, []int{9, 1})
		// 20 streams a pod, as the e2e test's: at one per 100 ms no spread
		// up to 10 minutes keeps them apart with 95% probability.
		r.Streams.HerdCleanPeak, r.Streams.OpenAtSigterm = tc.clean, 20
		s.Add(r)
		s.Close()
		if _, ok := SpreadFor(s.MaxOpen, tc.clean, HerdBin, SpreadConfidence); tc.clean > 0 && ok {
			t.Fatalf("clean peak %d: SpreadFor found a spread; the case needs one it cannot", tc.clean)
		}
		got := streamAdvice(s)
		if !strings.Contains(got, tc.want) || strings.Contains(got, "Spread the closes over") || strings.Contains(got, "needs no spread") {
			t.Errorf("clean peak %d: advice\n%s\nwant %q", tc.clean, got, tc.want)
		}
	}
}

func TestTextReportHasStreamsSection(t *testing.T) {
	s := NewSummary(nil, Options{})
	for i := range 3 {
		s.Add(streamRecord(i, time.Second, 0, []int{9, 1}))
	}
	s.Close()
	var b bytes.Buffer
	if err := NewTextReporter(s)(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Long-lived connections (websocket") {
		t.Fatalf("text report without the streams section:\n%s", b.String())
	}
	// A run without streams has no such section.
	s = NewSummary(nil, Options{})
	s.Add(&Record{Kind: KindTrial, Trial: 0})
	s.Close()
	b.Reset()
	if err := NewTextReporter(s)(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Long-lived") {
		t.Fatalf("streams section in a run without streams:\n%s", b.String())
	}
}

func TestClusterStreamsSection(t *testing.T) {
	s := NewSummary(nil, Options{})
	r := streamRecord(0, time.Second, 0, []int{3})
	r.ClusterStreams, r.Streams = r.Streams, nil
	s.Add(r)
	s.Close()
	var b bytes.Buffer
	if err := NewTextReporter(s)(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Long-lived connections (websocket, through the ClusterIP") || s.Streams().Trials() != 0 {
		t.Fatalf("report:\n%s", b.String())
	}
}

// A trial whose streams all outlived the observation (issue 28 item 11)
// enters stream_last_close and stream_outlive at its floor (the end of the
// observation), censored: it is the slowest trial, and the grace bound
// resting on it is a floor. Without it the bound would be a plain number
// from the faster trials.
func TestStreamSummaryAllOutlivedIsAFloor(t *testing.T) {
	// 59 trials: the bound of the 95th percentile at 95% is their
	// largest, the outlived trial's floor.
	s := NewStreamSummary(0.95, 0.95)
	for i := range 58 {
		s.Add(streamRecord(i, time.Second+time.Duration(i)*10*time.Millisecond, 0, []int{5, 5}))
	}
	observed, outlive := int64(30*time.Second), int64(29*time.Second)
	open := 10
	s.Add(&Record{Kind: KindTrial, Trial: 58, Streams: &StreamTrial{Protocol: "websocket",
		OpenAtSigterm: 10, Unclosed: 10, ObservedNS: &observed, OpenAtWithdrawal: &open, OutliveNS: &outlive}})
	s.Close()
	for metric, want := range map[string]int64{MetricStreamLastClose: observed, MetricStreamOutlive: outlive} {
		d, ok := s.Dist(metric)
		if metric == MetricStreamOutlive && !ok {
			continue // the faster trials have no withdrawal: only the floor
		}
		if !ok || d.Censored != 1 || d.MaxNS != want || !d.Lower(1) {
			t.Errorf("%s: %+v, want the outlived trial in it as a floor of %s", metric, d, time.Duration(want))
		}
	}
	if _, lower, ok := s.StreamGrace(0, time.Second); !ok || !lower {
		t.Errorf("grace: lower %v ok %v, want a floor", lower, ok)
	}
}
