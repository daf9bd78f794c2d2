package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeRun(t *testing.T, h *Header, trials []Record, sum *SummaryDoc) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if h != nil {
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	for i := range trials {
		if err := w.WriteTrial(&trials[i]); err != nil {
			t.Fatal(err)
		}
	}
	if sum != nil {
		if err := w.WriteSummary(sum); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestJSONLinesRoundTrip(t *testing.T) {
	spec := synthSpec{seed: 3, trials: 6, poll: 3 * time.Second, invalid: map[int]Reason{2: {Code: ReasonWatchBroken, Detail: "the pods watch broke"}}, hold: 2500 * time.Millisecond}
	h := synthHeader(spec)
	trials := synthTrials(spec)
	sum := synthSummary(spec).Doc()
	f, err := Decode(bytes.NewReader(writeRun(t, h, trials, sum)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Format != FormatJSONLines || f.Interrupted() || f.Truncated {
		t.Errorf("format %q interrupted %v truncated %v, want jsonl, complete", f.Format, f.Interrupted(), f.Truncated)
	}
	if !reflect.DeepEqual(f.Header, h) {
		t.Errorf("header:\n got %+v\nwant %+v", f.Header, h)
	}
	if !reflect.DeepEqual(f.Trials, trials) {
		t.Errorf("trials differ after round trip:\n got %+v\nwant %+v", f.Trials, trials)
	}
	if !reflect.DeepEqual(f.Summary, sum) {
		t.Errorf("summary:\n got %+v\nwant %+v", f.Summary, sum)
	}
}

func TestJSONEncoderRoundTrip(t *testing.T) {
	trials := synthTrials(synthSpec{seed: 4, trials: 3, poll: time.Second})
	var buf bytes.Buffer
	enc := NewJSONEncoder(&buf)
	for i := range trials {
		if err := enc(&trials[i]); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if f.Header != nil || !reflect.DeepEqual(f.Trials, trials) {
		t.Errorf("bare trial stream did not round-trip: header %v, trials equal %v", f.Header, reflect.DeepEqual(f.Trials, trials))
	}
}

func TestCSVRoundTrip(t *testing.T) {
	trials := synthTrials(synthSpec{seed: 5, trials: 4, poll: 3 * time.Second, invalid: map[int]Reason{3: {Code: ReasonSkewBound, Detail: "skew bound 80ms > 50ms, with a comma; and a semicolon"}}, hold: 2500 * time.Millisecond})
	// A trial without stages and one with a quoted key must survive too.
	trials = append(trials, Record{Kind: KindTrial, Trial: 9, Pod: "p9", PodIP: "10.244.0.9", Valid: false, Invalid: "probe unreachable",
		T0: synthStart, ClientFailures: map[string]int{"refused": 2, "reset": 1}})
	trials[0].Stages = append(trials[0].Stages, Stage{Name: StageLastAccept, Key: `[fd00::1]:80,"x"`, At: synthStart, Clock: ClockPod})
	var buf bytes.Buffer
	enc := NewCSVEncoder(&buf)
	for i := range trials {
		if err := enc(&trials[i]); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if f.Format != FormatCSV || f.Interrupted() {
		t.Errorf("format %q interrupted %v, want csv, not interrupted", f.Format, f.Interrupted())
	}
	if !reflect.DeepEqual(f.Trials, trials) {
		t.Errorf("trials differ after csv round trip:\n got %+v\nwant %+v", f.Trials, trials)
	}
}

func TestCSVReporterRoundTrip(t *testing.T) {
	spec := synthSpec{seed: 6, trials: 5, poll: time.Second, invalid: map[int]Reason{1: {Code: ReasonWatchBroken}}}
	s := synthSummary(spec)
	var buf bytes.Buffer
	if err := NewCSVReporter(s)(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Trials, synthTrials(spec)) {
		t.Error("csv report does not decode back to the summary's trials")
	}
}

func TestDecodeInterrupted(t *testing.T) {
	spec := synthSpec{seed: 7, trials: 4, poll: time.Second}
	trials := synthTrials(spec)
	full := writeRun(t, synthHeader(spec), trials, nil)

	t.Run("no summary", func(t *testing.T) {
		f, err := Decode(bytes.NewReader(full))
		if err != nil {
			t.Fatal(err)
		}
		if !f.Interrupted() || f.Truncated || len(f.Trials) != 4 {
			t.Errorf("interrupted %v truncated %v trials %d, want true false 4", f.Interrupted(), f.Truncated, len(f.Trials))
		}
	})
	t.Run("cut last line", func(t *testing.T) {
		cut := full[:len(full)-40] // inside the last trial's line
		f, err := Decode(bytes.NewReader(cut))
		if err != nil {
			t.Fatal(err)
		}
		if !f.Interrupted() || !f.Truncated || len(f.Trials) != 3 {
			t.Errorf("interrupted %v truncated %v trials %d, want true true 3", f.Interrupted(), f.Truncated, len(f.Trials))
		}
		if !reflect.DeepEqual(f.Trials, trials[:3]) {
			t.Error("the whole trials before the cut line changed")
		}
	})
	t.Run("summary marked interrupted", func(t *testing.T) {
		s := synthSummary(spec)
		s.MarkInterrupted()
		f, err := Decode(bytes.NewReader(writeRun(t, synthHeader(spec), trials, s.Doc())))
		if err != nil {
			t.Fatal(err)
		}
		if !f.Interrupted() || f.Summary == nil || len(f.Trials) != 4 {
			t.Errorf("interrupted %v summary %v trials %d, want true, present, 4", f.Interrupted(), f.Summary != nil, len(f.Trials))
		}
	})
	t.Run("malformed line in the middle", func(t *testing.T) {
		lines := bytes.SplitAfter(full, []byte("\n"))
		bad := append(append(append([]byte{}, lines[0]...), lines[1][:20]...), '\n')
		for _, l := range lines[2:] {
			bad = append(bad, l...)
		}
		_, err := Decode(bytes.NewReader(bad))
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("err = %v, want a malformed-record error naming line 2", err)
		}
	})
}

func TestDecodeTolerant(t *testing.T) {
	in := `
{"kind":"header","schema":1,"started_at":"2026-11-29T18:00:00Z","ingress":{"class":"nginx"},"future_field":{"a":1}}
{"kind":"note","text":"a kind this reader does not know"}
{"kind":"trial","trial":1,"pod":"p","pod_ip":"10.244.0.5","valid":true,"t0":"2026-11-29T18:00:01Z","stages":[{"name":"last_request","at":"2026-11-29T18:00:02Z","offset_ns":1000000000,"clock":"pod","new":true}],"extra":[1,2]}
{"kind":"summary","trials":1,"valid":1,"stages":[],"later":"x"}
`
	f, err := Decode(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if f.Header == nil || f.Header.Ingress.Class != "nginx" || len(f.Trials) != 1 || f.Summary == nil || f.Interrupted() {
		t.Fatalf("decoded %+v", f)
	}
	if w, ok := f.Trials[0].Window(); !ok || w != time.Second {
		t.Errorf("window = %v, %v; want 1s", w, ok)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"empty":         "  \n",
		"newer schema":  `{"kind":"header","schema":99}` + "\n",
		"not a results": "a,b,c\n1,2,3\n",
		"bad csv value": strings.Join(csvHeader, ",") + "\nx,p,n,ip,true,,,,,,,,,,,\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode(strings.NewReader(in)); err == nil {
				t.Error("decoded without error")
			}
		})
	}
}

// TestWriterFlushesEachRecord: with a buffering sink, every record reaches
// the underlying writer as a whole line as soon as it is written.
func TestWriterFlushesEachRecord(t *testing.T) {
	var sink bytes.Buffer
	bw := bufio.NewWriterSize(&sink, 1<<20)
	w := NewWriter(bw)
	spec := synthSpec{seed: 8, trials: 2, poll: time.Second}
	if err := w.WriteHeader(synthHeader(spec)); err != nil {
		t.Fatal(err)
	}
	for i, r := range synthTrials(spec) {
		if err := w.WriteTrial(&r); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Count(sink.Bytes(), []byte("\n")); got != i+2 || sink.Bytes()[sink.Len()-1] != '\n' {
			t.Fatalf("after trial %d the sink holds %d whole lines, want %d", r.Trial, got, i+2)
		}
	}
}

func jsonUnmarshalStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// A version-1 file (the layout before coded reasons) still reads: its
// free-text reasons are classified into codes, and it renders a report
// (golden v1.txt).
func TestDecodeVersion1(t *testing.T) {
	fh, err := os.Open(filepath.Join("testdata", "v1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := Decode(fh)
	if err != nil {
		t.Fatal(err)
	}
	if f.Header == nil || f.Header.Schema != 1 || len(f.Trials) != 20 || f.Summary == nil {
		t.Fatalf("v1 file: header %+v, %d trials, summary %v", f.Header, len(f.Trials), f.Summary != nil)
	}
	got := map[int]string{}
	for _, r := range f.Trials {
		if !r.Valid {
			got[r.Trial] = r.ReasonList()[0].Code
		}
	}
	if want := map[int]string{4: ReasonProbeUnreadable, 11: ReasonSkewBound}; !reflect.DeepEqual(got, want) {
		t.Errorf("v1 reasons classified as %v, want %v", got, want)
	}
	newer := []byte(`{"kind":"header","schema":3}` + "\n")
	if _, err := Decode(bytes.NewReader(newer)); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("schema 3: err %v, want one saying it is newer", err)
	}
}

// Header.Route round-trips, is left out of the file for an older header
// without one, and a header carrying it reads in a decoder that predates it
// (encoding/json skips unknown fields), so schema 2 stands.
func TestHeaderRouteRoundTrip(t *testing.T) {
	h := &Header{StartedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Route: Route{Kind: RouteKindHTTPRoute,
		Gateway: "gw/traefik/web", GatewayClass: "traefik", Controller: "traefik.io/gateway-controller"}}
	data := writeRun(t, h, nil, nil)
	if !bytes.Contains(data, []byte(`"route":{"kind":"HTTPRoute","gateway":"gw/traefik/web","gateway_class":"traefik","controller":"traefik.io/gateway-controller"}`)) {
		t.Errorf("header line %s", data)
	}
	f, err := Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if f.Header.Route != h.Route || f.Header.Schema != 2 {
		t.Errorf("route %+v schema %d, want %+v in schema 2", f.Header.Route, f.Header.Schema, h.Route)
	}
	var older struct {
		Kind   Kind `json:"kind"`
		Schema int  `json:"schema"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(data), &older); err != nil || older.Schema != SchemaVersion {
		t.Errorf("a reader without Route: %+v, %v", older, err)
	}
	if data := writeRun(t, &Header{}, nil, nil); bytes.Contains(data, []byte(`"route"`)) {
		t.Errorf("a header without a route writes one: %s", data)
	}
}
