package results

import (
	"bytes"
	"encoding/csv"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// startupTrial is a valid trial whose replacement started at 100 ms,
// listened at listen, turned Ready 50 ms after the later of its start and
// its listener (the kubelet's probe), was ready in the slices 10 ms later
// and listed by the ingress lag after Ready.
func startupTrial(n int, listen, readyAt, lag time.Duration, failures map[string]int) *Record {
	ms := time.Millisecond
	r := trial(n, 0, 2*time.Second)
	r.NewPod = "probe-new"
	r.StartupFailures = failures
	r.Stages = append(r.Stages,
		st(StagePodCreated, "", 20*ms), st(StagePodScheduled, "", 25*ms),
		Stage{Name: StageContainerStarted, OffsetNS: int64(100 * ms), UncertaintyNS: int64(ms), Clock: ClockPod},
		Stage{Name: StageListenerOpen, OffsetNS: int64(listen), UncertaintyNS: int64(ms), Clock: ClockPod},
		st(StagePodReadyCondition, "", readyAt), st(StageSliceReady, "", readyAt+10*ms),
		st(StageUpstreamPresent, "skipper/a", readyAt+lag/2), st(StageUpstreamPresent, "skipper/b", readyAt+lag),
		st(StageFirstRequest, "", max(listen, readyAt+lag/2)+5*ms))
	for i := range r.Stages {
		r.Stages[i].At = r.T0.Add(time.Duration(r.Stages[i].OffsetNS))
	}
	return r
}

func TestSummaryStartup(t *testing.T) {
	ms := time.Millisecond
	s := NewSummary(nil, Options{})
	// Behind a readiness probe: Ready after the listener, the ingress lists
	// the pod 0.4 … 2.8 s after Ready.
	for i, lag := range []time.Duration{400 * ms, 1200 * ms, 2800 * ms, 2000 * ms} {
		s.Add(startupTrial(i+1, 3100*ms, 3150*ms, lag, nil))
	}
	s.Add(trial(5, 0, time.Second)) // no startup stages (an older file)
	s.Close()
	d := s.Doc()
	if len(d.StartupStages) != len(StartupPoints)-1 { // no client_first_routed
		t.Errorf("startup stages %d, want %d", len(d.StartupStages), len(StartupPoints)-1)
	}
	lag, ok := s.Dist(deltaReadyToUpstream)
	if !ok || lag.N != 4 || lag.MaxNS != int64(2800*ms) {
		t.Fatalf("pod_ready_condition→upstream_present = %+v, want n=4, max 2.8s (latest replica)", lag)
	}
	if d, ok := s.Dist("container_started->pod_ready_condition"); !ok || d.MinNS != int64(3050*ms) {
		t.Errorf("container_started→pod_ready_condition = %+v, want 3.05s", d)
	}
	r := d.StartupRecommendation
	if r == nil {
		t.Fatal("no startup recommendation")
	}
	// p99 of 4 trials: the largest, 2.8 s → minReadySeconds 3.
	if r.N != 4 || r.LagNS != int64(2800*ms) || r.MinReadySeconds != 3 || r.MissingReadinessProbe() || r.ReadinessGate != "" {
		t.Errorf("recommendation %+v, want lag 2.8s → minReadySeconds 3, readiness probe present", r)
	}
	lines := strings.Join(r.Lines(), "\n")
	if !strings.Contains(lines, "minReadySeconds: 3") || strings.Contains(lines, "readiness probe is missing") {
		t.Errorf("lines:\n%s", lines)
	}
	var out bytes.Buffer
	if err := NewTextReporter(s)(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"startup, offsets from T0", "pod_ready_condition→upstream_present", "minReadySeconds: 3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}
	// --max-p99 and compare see the startup metrics like any other.
	th, err := ParseMaxP99([]string{"pod_ready_condition->upstream_present=2s"})
	if err != nil {
		t.Fatal(err)
	}
	if b := (Thresholds{MaxP99: th}).Check(s, nil); len(b) != 1 || b[0].Metric != deltaReadyToUpstream {
		t.Errorf("breaches %v, want the startup delta over 2s", b)
	}
	// At 4 trials no test can be made: the metric is there, not judged,
	// never "same" (that would claim a test that was not made).
	c := Compare(s, s, CompareOptions{})
	m, ok := c.Metric(deltaReadyToUpstream)
	if !ok || m.Verdict != NotJudged || m.NotJudged != NotJudgedFewTrials || m.Need <= m.NNew {
		t.Errorf("comparison of %s at %d trials: %+v, want not judged for few trials, needing more", deltaReadyToUpstream, m.NNew, m)
	}
}

func TestSummaryStartupNoReadinessProbe(t *testing.T) {
	ms := time.Millisecond
	s := NewSummary(&Header{Ingress: Ingress{Class: "alb"}}, Options{})
	// Ready at its start, listening 3 s later: routed before it listens.
	s.Add(startupTrial(1, 3100*ms, 120*ms, 900*ms, map[string]int{"status_502": 40}))
	s.Add(startupTrial(2, 3100*ms, 120*ms, 300*ms, nil))
	s.Close()
	d := s.Doc()
	r := d.StartupRecommendation
	if r == nil || r.RoutedBeforeListening != 2 || !r.MissingReadinessProbe() {
		t.Fatalf("recommendation %+v, want both trials routed before listening", r)
	}
	if r.ReadinessGate != ReadinessGateLabel {
		t.Errorf("readiness gate %q on class alb, want %q", r.ReadinessGate, ReadinessGateLabel)
	}
	if d.StartupFailures["status_502"] != 40 {
		t.Errorf("startup failures %v", d.StartupFailures)
	}
	var out bytes.Buffer
	if err := NewMarkdownReporter(s)(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"A readiness probe is missing", ReadinessGateLabel, "status_502 40"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("markdown report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestStartupCSVRoundTrip(t *testing.T) {
	r := startupTrial(1, 3*time.Second, 100*time.Millisecond, time.Second, map[string]int{"refused": 3})
	r.NewPodIP, r.StartupNote = "10.244.0.12", "replacement probe-new not Ready yet: the run was interrupted"
	var buf bytes.Buffer
	if err := NewCSVEncoder(&buf)(r); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Trials) != 1 || !reflect.DeepEqual(&f.Trials[0], r) {
		t.Errorf("csv round trip:\n got %+v\nwant %+v", f.Trials, r)
	}
	// A file written before the startup columns still decodes.
	rows, err := csv.NewReader(bytes.NewReader(buf.Bytes())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var old bytes.Buffer
	w := csv.NewWriter(&old)
	cut := slices.Index(csvHeader, "new_pod")
	for _, row := range rows {
		_ = w.Write(row[:cut])
	}
	w.Flush()
	if f, err = Decode(&old); err != nil || len(f.Trials) != 1 || f.Trials[0].NewPod != "" {
		t.Errorf("old layout: %v %+v", err, f)
	}
}
