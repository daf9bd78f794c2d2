package probe

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// fullTimeline records something in every field of a Timeline, with peers
// peers, each on its own second so their order is known.
func fullTimeline(t *testing.T, peers int) Timeline {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	r := NewRecorder(clk, "probe-7c9d8b6f5-x2x9q", 1500*time.Millisecond, peers)
	r.ListenerOpen()
	for i := 0; i < peers; i++ {
		clk.SetTime(at(time.Duration(i) * time.Second))
		c := r.Accept(netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}))
		r.Request(c, i%2 == 0)
		r.Request(c, false)
	}
	clk.SetTime(at(time.Duration(peers)*time.Second + 123456789))
	r.Prestop()
	r.Sigterm()
	c := r.Accept(netip.MustParseAddr("10.244.9.9"))
	r.Request(c, true)
	r.Release()
	r.HoldExpired()
	r.Exit()
	r.Accept(netip.MustParseAddr("10.245.0.1")) // beyond the cap
	tl := r.Timeline()
	opened, ended, code := at(time.Second).Round(0), at(5*time.Second).Round(0), CodeServiceRestart
	tl.Streams = &StreamLog{Drain: "close", Opened: 2, Open: 1, OpenAtSigterm: 2,
		Ended: map[string]int64{EndAppClose: 1}, RecordsDropped: 1,
		Records: []StreamRecord{{ID: 1, Protocol: ProtoWebSocket, Peer: "10.244.0.7:40000", Opened: opened,
			Ended: &ended, How: EndAppClose, Code: &code, Messages: 4}}}
	return tl
}

func TestTimelineRoundTrip(t *testing.T) {
	want := fullTimeline(t, 3)
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	// Every field is set, so every field is exercised by the round trip.
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeOf(Timeline{})
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if _, ok := fields[name]; !ok && name != "peers_omitted" {
			t.Errorf("field %q not set by the test timeline: %s", name, b)
		}
	}
	if !strings.Contains(string(b), `"sigterm":"2026-11-29T12:00:04.623456789Z"`) {
		t.Errorf("instants are not RFC 3339 with ns (offset included): %s", b)
	}

	got, err := ParseTimeline(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		t.Errorf("round trip changed the timeline:\n got %s\nwant %s", g, b)
	}
}

func TestParseTimelineRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":      `{"version":`,
		"wrong version": `{"version":2,"pod":"p"}`,
		"no version":    `{"pod":"p"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseTimeline([]byte(in)); err == nil {
				t.Errorf("ParseTimeline(%s) = nil error", in)
			}
		})
	}
}

func TestTerminationMessageFitsAndKeepsLatestPeers(t *testing.T) {
	for _, peers := range []int{0, 3, 1024} {
		t.Run(fmt.Sprintf("peers=%d", peers), func(t *testing.T) {
			tl := fullTimeline(t, peers)
			b, err := TerminationMessage(tl)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > MaxTerminationMessage {
				t.Fatalf("termination message is %d bytes, over %d", len(b), MaxTerminationMessage)
			}
			got, err := ParseTimeline(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.PeersOmitted+len(got.Peers) != len(tl.Peers) {
				t.Errorf("kept %d + omitted %d peers, had %d", len(got.Peers), got.PeersOmitted, len(tl.Peers))
			}
			if !reflect.DeepEqual(got.Peers, tl.Peers[:len(got.Peers)]) {
				t.Errorf("kept peers are not the latest ones first")
			}
			if got.Sigterm == nil || got.TrafficAcceptsAfterSigterm != tl.TrafficAcceptsAfterSigterm || got.Accepts != tl.Accepts {
				t.Errorf("totals or instants lost in trimming: %s", b)
			}
			if peers == 1024 {
				if got.PeersOmitted == 0 {
					t.Errorf("1024 peers fit in 4 KiB? %d bytes", len(b))
				}
				// Trimming is tight: one more peer would not have fitted.
				more := got
				more.Peers = tl.Peers[:len(got.Peers)+1]
				more.PeersOmitted--
				if m, _ := json.Marshal(more); len(m) <= MaxTerminationMessage {
					t.Errorf("trimmed to %d peers but %d fit (%d bytes)", len(got.Peers), len(more.Peers), len(m))
				}
			}
		})
	}
}

func TestTerminationMessageTooLong(t *testing.T) {
	tl := fullTimeline(t, 0)
	tl.Pod = strings.Repeat("p", MaxTerminationMessage)
	if _, err := TerminationMessage(tl); err == nil || !strings.Contains(err.Error(), "--pod-name") {
		t.Errorf("err = %v, want one naming --pod-name", err)
	}
}

func TestWriteTerminationLog(t *testing.T) {
	tl := fullTimeline(t, 3)
	path := filepath.Join(t.TempDir(), "termination-log")
	// The kubelet's file exists (bind mount) and may hold an older message.
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 8000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteTerminationLog(path, tl); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseTimeline(b)
	if err != nil {
		t.Fatalf("file does not hold the timeline alone: %v", err)
	}
	// The stream records stay out of the termination message; the counts
	// go in.
	want := tl
	counts := *tl.Streams
	counts.Records = nil
	want.Streams = &counts
	if !reflect.DeepEqual(got, want) {
		t.Errorf("written timeline differs: %s", b)
	}

	err = WriteTerminationLog(filepath.Join(t.TempDir(), "missing", "termination-log"), tl)
	if err == nil || !strings.Contains(err.Error(), "--termination-log") {
		t.Errorf("err = %v, want one naming --termination-log", err)
	}
}

// The stream ends since SIGTERM ride in the termination message beside the
// peers: all of them when they fit; else the peers first and the latest
// ends in the room left, with EndsDropped counting the rest.
func TestTerminationMessageKeepsStreamEnds(t *testing.T) {
	for _, tc := range []struct{ peers, streams int }{{3, 10}, {3, 200}, {1024, 10}} {
		t.Run(fmt.Sprintf("peers=%d,streams=%d", tc.peers, tc.streams), func(t *testing.T) {
			tl := fullTimeline(t, tc.peers)
			before := tl.Sigterm.Add(-time.Second).Round(0)
			recs := []StreamRecord{{ID: 0, Client: "before-sigterm", Ended: &before, How: EndPeerGone}}
			for i := range tc.streams {
				end := tl.Sigterm.Add(time.Duration(i) * time.Millisecond).Round(0)
				recs = append(recs, StreamRecord{ID: uint64(i + 1), Protocol: ProtoWebSocket, Peer: "10.244.0.7:40000",
					Client: fmt.Sprintf("c%03d-%d-0", i, i), Opened: before, Ended: &end, How: EndProcessExit})
			}
			recs = append(recs, StreamRecord{ID: 9999, Client: "still-open", Opened: before})
			tl.Streams.Records = recs
			b, err := TerminationMessage(tl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseTimeline(b)
			if err != nil {
				t.Fatal(err)
			}
			s := got.Streams
			if s == nil || s.Records != nil || len(s.Ends)+s.EndsDropped != tc.streams {
				t.Fatalf("streams %+v: want no records and %d ends kept or dropped", s, tc.streams)
			}
			if got.PeersOmitted > 0 && len(s.Ends) > 0 {
				t.Errorf("%d peers omitted but %d stream ends kept: the peers go first", got.PeersOmitted, len(s.Ends))
			}
			for i, e := range s.Ends {
				want := tc.streams - len(s.Ends) + i
				if e.Client != fmt.Sprintf("c%03d-%d-0", want, want) || e.How != EndProcessExit ||
					e.EndNS != tl.Sigterm.Add(time.Duration(want)*time.Millisecond).UnixNano() {
					t.Errorf("end %d = %+v, want the latest ends in order (stream %d)", i, e, want)
				}
			}
			if tc.streams == 10 && tc.peers == 3 && s.EndsDropped != 0 {
				t.Errorf("10 ends dropped %d in %d bytes", s.EndsDropped, len(b))
			}
			if s.EndsDropped > 0 && got.PeersOmitted == 0 {
				// Tight: one more end would not have fitted.
				more := got
				m := *s
				m.Ends = append([]StreamEnd{{Client: "c999-999-0", EndNS: s.Ends[0].EndNS, How: EndProcessExit}}, s.Ends...)
				m.EndsDropped--
				more.Streams = &m
				if mb, _ := json.Marshal(more); len(mb) <= MaxTerminationMessage {
					t.Errorf("kept %d ends but one more fits (%d bytes)", len(s.Ends), len(mb))
				}
			}
			t.Logf("%d bytes, %d ends kept, %d dropped, %d peers omitted", len(b), len(s.Ends), s.EndsDropped, got.PeersOmitted)
		})
	}
}
