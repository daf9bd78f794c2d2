package measure

import (
	"reflect"
	"testing"
	"time"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
)

func TestStreamTrial(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	ev := []load.StreamEvent{
		// Slots 0–2 on the deleted pod, slot 3 on a survivor.
		{Slot: 0, Kind: load.EventOpen, At: ms(0), Pod: "a"},
		{Slot: 1, Kind: load.EventOpen, At: ms(1), Pod: "a"},
		{Slot: 2, Kind: load.EventOpen, At: ms(2), Pod: "a"},
		{Slot: 3, Kind: load.EventOpen, At: ms(3), Pod: "b"},
		// SIGTERM at 1000 ms; withdrawal at 1150 ms.
		{Slot: 0, Kind: load.EventClose, At: ms(1010), Pod: "a", How: load.CloseWS, Code: 1012},
		{Slot: 0, Kind: load.EventFail, At: ms(1020), How: "status_502"},
		{Slot: 0, Kind: load.EventOpen, At: ms(1120), Pod: "b"},
		{Slot: 1, Kind: load.EventClose, At: ms(1050), Pod: "a", How: load.CloseWS, Code: 1012},
		{Slot: 1, Kind: load.EventOpen, At: ms(1060), Pod: "c"},
		{Slot: 2, Kind: load.EventClose, At: ms(1200), Pod: "a", How: load.CloseEOF, Code: -1},
		{Slot: 2, Kind: load.EventOpen, At: ms(1290), Pod: "b"},
		// The survivor's stream closes too: not the pod's, not counted.
		{Slot: 3, Kind: load.EventClose, At: ms(1100), Pod: "b", How: load.CloseReset, Code: -1},
	}
	got := streamTrial(streamInput{events: ev, pod: "a", sigterm: ms(1000), withdrawn: ms(1150),
		probeLog: &probe.StreamLog{OpenAtSigterm: 3, Ended: map[string]int64{probe.EndAppClose: 2}},
		protocol: "websocket", drain: "close", reconnect: "immediate"})
	if got.OpenAtSigterm != 3 || got.Closed != 3 || got.Unclosed != 0 || got.Graceful != 2 || got.Abrupt != 1 {
		t.Fatalf("counts %+v", got)
	}
	if want := map[string]int{"ws_close 1012": 2, "eof": 1}; !reflect.DeepEqual(got.CloseKinds, want) {
		t.Errorf("close kinds %v, want %v", got.CloseKinds, want)
	}
	if *got.FirstCloseNS != int64(10*time.Millisecond) || *got.LastCloseNS != int64(200*time.Millisecond) {
		t.Errorf("first/last close %d/%d", *got.FirstCloseNS, *got.LastCloseNS)
	}
	if *got.OpenAtWithdrawal != 1 || *got.OutliveNS != int64(50*time.Millisecond) {
		t.Errorf("open at withdrawal %d, outlive %d; want 1, 50ms", *got.OpenAtWithdrawal, *got.OutliveNS)
	}
	// Re-opens at 1060, 1120, 1290 from the first close at 1010: bins 0, 1,
	// 2; the busiest 100 ms (sliding) holds 1060 and 1120.
	if want := []int{1, 1, 1}; !reflect.DeepEqual(got.Herd, want) || got.HerdPeak != 2 {
		t.Errorf("herd %v peak %d, want %v", got.Herd, got.HerdPeak, want)
	}
	// The 502 at 1020 is before both re-opens of the busiest window.
	if got.HerdCleanPeak != 2 {
		t.Errorf("clean peak %d, want 2", got.HerdCleanPeak)
	}
	if want := map[string]int{"b": 2, "c": 1}; !reflect.DeepEqual(got.Reopened, want) {
		t.Errorf("reopened %v, want %v", got.Reopened, want)
	}
	if want := map[string]int{"status_502": 1}; !reflect.DeepEqual(got.Failures, want) {
		t.Errorf("failures %v, want %v", got.Failures, want)
	}
	want := []int64{int64(10 * time.Millisecond), int64(90 * time.Millisecond), int64(110 * time.Millisecond)}
	if !reflect.DeepEqual(got.ReestablishNS, want) {
		t.Errorf("reestablish %v, want %v", got.ReestablishNS, want)
	}
	if got.ProbeOpenAtSigterm != 3 || got.ProbeEnds[probe.EndAppClose] != 2 {
		t.Errorf("probe side %+v", got)
	}
}

func TestStreamTrialUnclosedIsAFloor(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ev := []load.StreamEvent{
		{Slot: 0, Kind: load.EventOpen, At: t0, Pod: "a"},
		{Slot: 1, Kind: load.EventOpen, At: t0, Pod: "a"},
		{Slot: 0, Kind: load.EventClose, At: t0.Add(2 * time.Second), Pod: "a", How: load.CloseEOF, Code: -1},
	}
	got := streamTrial(streamInput{events: ev, pod: "a", sigterm: t0.Add(time.Second),
		withdrawn: t0.Add(1500 * time.Millisecond), until: t0.Add(5 * time.Second)})
	if got.Unclosed != 1 || *got.OpenAtWithdrawal != 2 || *got.OutliveNS != int64(3500*time.Millisecond) {
		t.Fatalf("unclosed %d, open at withdrawal %v, outlive %v; want 1, 2, 3.5s (until − withdrawal)", got.Unclosed, *got.OpenAtWithdrawal, *got.OutliveNS)
	}
}

// instants is t0 + each of ms milliseconds.
func instants(t0 time.Time, ms ...int) []time.Time {
	var out []time.Time
	for _, m := range ms {
		out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
	}
	return out
}

func TestBusiest(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time { return instants(t0, ms...) }
	for _, tc := range []struct {
		at   []time.Time
		want int
	}{
		{nil, 0},
		{at(0), 1},
		{at(0, 99), 2},
		{at(0, 100), 1},                // the window is [t, t+100ms)
		{at(60, 90, 120, 150, 400), 4}, // straddles the 100 ms bin edge
	} {
		if got := busiest(tc.at, 100*time.Millisecond); got != tc.want {
			t.Errorf("busiest(%v) = %d, want %d", tc.at, got, tc.want)
		}
	}
}

// Each closed stream of the pod is matched to the probe's record of it by
// the client's stream id, from the records (/timeline) or the termination
// message's ends, with the pod's clock moved onto the tool's: the lag is
// the client's close minus the probe's end. A stream the probe has no
// record of, and one of another pod, are not matched.
func TestStreamTrialMatchesTheProbesEnds(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const skew = 40 * time.Millisecond // pod clock − tool clock
	pod := func(n int) *time.Time { at := ms(n).Add(skew); return &at }
	ev := []load.StreamEvent{
		{Slot: 0, Stream: "x-0-0", Kind: load.EventOpen, At: ms(0), Pod: "a"},
		{Slot: 1, Stream: "x-1-0", Kind: load.EventOpen, At: ms(0), Pod: "a"},
		{Slot: 2, Stream: "x-2-0", Kind: load.EventOpen, At: ms(0), Pod: "a"},
		{Slot: 3, Stream: "x-3-0", Kind: load.EventOpen, At: ms(0), Pod: "b"},
		{Slot: 0, Stream: "x-0-0", Kind: load.EventClose, At: ms(1003), Pod: "a", How: load.CloseWS, Code: 1012},
		{Slot: 1, Stream: "x-1-0", Kind: load.EventClose, At: ms(3010), Pod: "a", How: load.CloseEOF, Code: -1},
		{Slot: 2, Stream: "x-2-0", Kind: load.EventClose, At: ms(3020), Pod: "a", How: load.CloseEOF, Code: -1},
		{Slot: 3, Stream: "x-3-0", Kind: load.EventClose, At: ms(3030), Pod: "b", How: load.CloseEOF, Code: -1},
	}
	log := &probe.StreamLog{
		// Read through /timeline: slot 0's end, at the drain.
		Records: []probe.StreamRecord{{ID: 1, Client: "x-0-0", Ended: pod(1001), How: probe.EndAppClose},
			{ID: 2, Client: "x-1-0"}}, // still open at that read
		// The termination message: slot 1's end at the exit; slot 2's
		// did not fit; slot 3 is another pod's.
		Ends: []probe.StreamEnd{{Client: "x-1-0", EndNS: pod(3000).UnixNano(), How: probe.EndProcessExit}},
	}
	got := streamTrial(streamInput{events: ev, pod: "a", sigterm: ms(1000), probeLog: log, probeSkew: skew})
	want := []int64{int64(2 * time.Millisecond), int64(10 * time.Millisecond)}
	if got.Closed != 3 || got.ProbeMatched != 2 || !reflect.DeepEqual(got.CloseLagNS, want) {
		t.Fatalf("closed %d, matched %d, lags %v; want 3, 2, %v", got.Closed, got.ProbeMatched, got.CloseLagNS, want)
	}
}

// streamLog takes the final timeline's counts and ends with the records of
// the last /timeline read.
func TestStreamLogMergesTheLastRead(t *testing.T) {
	end := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	term := &probe.Timeline{Streams: &probe.StreamLog{Opened: 3, Ends: []probe.StreamEnd{{Client: "x-1-0", How: probe.EndProcessExit}}}}
	read := &probe.Timeline{Streams: &probe.StreamLog{Opened: 2, Records: []probe.StreamRecord{{Client: "x-0-0", Ended: &end}}}}
	got := streamLog(term, read)
	if got.Opened != 3 || len(got.Ends) != 1 || len(got.Records) != 1 || got.Records[0].Client != "x-0-0" {
		t.Errorf("streamLog = %+v", got)
	}
	if got := streamLog(nil, read); got.Opened != 2 || len(got.Records) != 1 {
		t.Errorf("streamLog without a termination message = %+v", got)
	}
	if streamLog(nil, nil) != nil || streamLog(&probe.Timeline{}, nil) != nil {
		t.Errorf("streamLog without stream logs is not nil")
	}
}

func TestBusiestClean(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := func(ns ...int) []time.Time { return instants(t0, ns...) }
	// at: failed attempts that failed as they began (refused, a 502).
	at := func(ns ...int) []attempt {
		var out []attempt
		for _, t := range ms(ns...) {
			out = append(out, attempt{t, t})
		}
		return out
	}
	span := func(from, to int) []attempt { return []attempt{{ms(from)[0], ms(to)[0]}} }
	for _, tc := range []struct {
		name  string
		at    []time.Time
		fails []attempt
		want  int
	}{
		{"no failures: the sliding peak", ms(0, 10, 20, 150, 160), nil, 3},
		{"a failure inside the burst cuts it", ms(0, 10, 20, 150, 160), at(15), 2},
		{"the window after the failure", ms(0, 10, 20, 30, 40, 200), at(5), 4},
		{"a failure at an instant leaves the rest after it", ms(0, 10, 20), at(0), 2},
		{"failures everywhere", ms(0, 10), at(0, 10), 0},
		{"none", nil, at(0), 0},
		// Issue 28 item 12: an attempt begun inside the burst that timed
		// out after it was not taken; stamped at its end alone it left
		// the burst clean.
		{"an attempt begun in the burst, failed after it", ms(0, 10, 20, 30), span(15, 500), 2},
		{"an attempt spanning the whole burst", ms(100, 110, 120), span(50, 300), 0},
		{"an attempt over before the burst", ms(100, 110, 120), span(0, 90), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := busiestClean(tc.at, tc.fails, 100*time.Millisecond); got != tc.want {
				t.Errorf("busiestClean = %d, want %d", got, tc.want)
			}
			if got, peak := busiestClean(tc.at, tc.fails, 100*time.Millisecond), busiest(tc.at, 100*time.Millisecond); got > peak {
				t.Errorf("clean peak %d over the peak %d", got, peak)
			}
		})
	}
}

// Every stream outlived the observation (issue 28 item 11): no close was
// seen, so the trial's last close and outlive are floors — the end of the
// observation from SIGTERM and from the withdrawal — not missing: the
// slowest trial must not vanish from the distribution.
func TestStreamTrialAllOutlived(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ev := []load.StreamEvent{
		{Slot: 0, Kind: load.EventOpen, At: t0, Pod: "a"},
		{Slot: 1, Kind: load.EventOpen, At: t0, Pod: "a"},
	}
	got := streamTrial(streamInput{events: ev, pod: "a", sigterm: t0.Add(time.Second),
		withdrawn: t0.Add(1500 * time.Millisecond), until: t0.Add(5 * time.Second)})
	if got.Unclosed != 2 || got.Closed != 0 || got.LastCloseNS != nil {
		t.Fatalf("counts %+v: want 2 unclosed, none closed, no last close seen", got)
	}
	if got.ObservedNS == nil || *got.ObservedNS != int64(4*time.Second) {
		t.Errorf("observed %v, want SIGTERM → end of observation, 4s", got.ObservedNS)
	}
	if got.OpenAtWithdrawal == nil || *got.OpenAtWithdrawal != 2 || got.OutliveNS == nil || *got.OutliveNS != int64(3500*time.Millisecond) {
		t.Errorf("open at withdrawal %v, outlive %v; want 2 and the floor 3.5s", got.OpenAtWithdrawal, got.OutliveNS)
	}
}

// A re-open attempt begun among the re-opens that timed out later (issue
// 28 item 12) makes their 100 ms unclean, though it failed outside it.
func TestStreamTrialCleanPeakFromAttemptStart(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	var ev []load.StreamEvent
	for slot := range 4 {
		ev = append(ev, load.StreamEvent{Slot: slot, Kind: load.EventOpen, At: ms(slot), Pod: "a"})
		ev = append(ev, load.StreamEvent{Slot: slot, Kind: load.EventClose, At: ms(1000), Pod: "a", How: load.CloseEOF, Code: -1})
	}
	// Slots 0-2 re-open on a survivor at 1010-1030; slot 3's attempt
	// begins at 1015 and times out at 3015, then re-opens.
	for slot := range 3 {
		ev = append(ev, load.StreamEvent{Slot: slot, Kind: load.EventOpen, At: ms(1010 + 10*slot), Pod: "b"})
	}
	ev = append(ev, load.StreamEvent{Slot: 3, Kind: load.EventFail, Began: ms(1015), At: ms(3015), How: "timeout"},
		load.StreamEvent{Slot: 3, Kind: load.EventOpen, At: ms(3020), Pod: "b"})
	got := streamTrial(streamInput{events: ev, pod: "a", sigterm: ms(900)})
	if got.HerdPeak != 3 || got.HerdCleanPeak != 1 {
		t.Errorf("peak %d, clean peak %d; want 3 and 1 (only 1010 comes before the attempt that began at 1015)", got.HerdPeak, got.HerdCleanPeak)
	}
}
