package results

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// pathTrial is a trial with both paths: the ingress's client saw its last
// response at ingress, the runner at 10.244.1.5 at cluster; the probe saw
// the runner's last connection 1 ms before that response, and the ingress's
// 2 ms before.
func pathTrial(n int, ingress, cluster time.Duration) *Record {
	ms := time.Millisecond
	r := rec(st(StageSliceNotReady, "", 50*ms), st(StagePrestopCalled, "", 10*ms), st(StageSigterm, "", 15*ms),
		st(StageClientLastRouted, "", ingress), st(StageLastAccept, "10.244.0.1", ingress-2*ms),
		st(StageClusterLastRouted, "runner-a/node-1", cluster), st(StageLastAccept, "10.244.1.5", cluster-ms),
		st(StageLastRequest, "", max(ingress, cluster)-ms))
	r.Trial = n
	r.Runners = []Runner{{Pod: "runner-a", Node: "node-1", IP: "10.244.1.5", SkewNS: 3e6, SkewUncertaintyNS: 4e5,
		Failures: map[string]int{"refused": 1}}}
	r.ClusterFailures = map[string]int{"refused": 1}
	return r
}

func TestPathsSideBySide(t *testing.T) {
	s := NewSummary(nil, Options{})
	s.Add(pathTrial(1, 3*time.Second, 1200*time.Millisecond))
	s.Add(pathTrial(2, 2*time.Second, 2500*time.Millisecond))
	s.Add(pathTrial(3, 4*time.Second, 1100*time.Millisecond))
	s.Close()
	d := s.Doc()
	if len(d.Paths) != 2 {
		t.Fatalf("paths = %+v, want ingress and clusterip", d.Paths)
	}
	in, cl := d.Paths[0], d.Paths[1]
	if in.Path != PathIngress || cl.Path != PathClusterIP {
		t.Fatalf("path order %s, %s", in.Path, cl.Path)
	}
	if in.Latest != 2 || cl.Latest != 1 || in.Compared != 3 {
		t.Errorf("ended last: ingress %d, clusterip %d of %d; want 2, 1 of 3", in.Latest, cl.Latest, in.Compared)
	}
	if cl.Last.MaxNS != int64(2500*time.Millisecond) || cl.AfterNotReady.MaxNS != int64(2450*time.Millisecond) {
		t.Errorf("clusterip last %+v after-not-ready %+v", cl.Last, cl.AfterNotReady)
	}
	// The probe's view splits last_accept by the runners' addresses.
	if cl.ProbeLast.MaxNS != int64(2499*time.Millisecond) || in.ProbeLast.MaxNS != int64(3998*time.Millisecond) {
		t.Errorf("probe last: clusterip %d ingress %d", cl.ProbeLast.MaxNS, in.ProbeLast.MaxNS)
	}
	if p, _ := d.SetsWindow(); p != PathIngress {
		t.Errorf("SetsWindow = %s, want ingress", p)
	}
	if d.ClusterFailures["refused"] != 3 {
		t.Errorf("cluster failures %v", d.ClusterFailures)
	}
	// The window is the probe's, over every peer: trial 2's runner sets it.
	if w, ok := s.Records()[1].Window(); !ok || w != 2499*time.Millisecond {
		t.Errorf("trial 2 window %s, want the runner's last accept 2.499s", w)
	}
	if dist, ok := s.Dist(Delta{StageSliceNotReady, StageClusterLastRouted}.Name()); !ok || dist.N != 3 {
		t.Errorf("slice_not_ready→cluster_last_routed %+v", dist)
	}

	for _, format := range []string{"text", "markdown"} {
		var b bytes.Buffer
		if err := Reporters[format](s)(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, want := range []string{"side by side", "client_last_routed", "cluster_last_routed", "2/3", "1/3",
			"The ingress path ended last in 2 of 3 trials that timed it beside another path", "refused 3"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s report lacks %q:\n%s", format, want, out)
			}
		}
	}
	var b bytes.Buffer
	if err := Reporters["json"](s)(&b); err != nil {
		t.Fatal(err)
	}
	var rep JSONReport
	if err := json.Unmarshal(b.Bytes(), &rep); err != nil || len(rep.Summary.Paths) != 2 || rep.Summary.Paths[1].Last.N != 3 {
		t.Errorf("json report paths %+v (%v)", rep.Summary.Paths, err)
	}
}

// Without runners nothing changes: no paths section, no new table row.
func TestPathsAbsentWithoutRunners(t *testing.T) {
	s := NewSummary(nil, Options{})
	s.Add(trial(1, 0, time.Second))
	s.Close()
	if len(s.Doc().Paths) != 0 {
		t.Errorf("paths %+v without runners", s.Doc().Paths)
	}
	var b bytes.Buffer
	if err := Reporters["text"](s)(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "side by side") || strings.Contains(b.String(), StageClusterLastRouted) {
		t.Errorf("text report mentions the ClusterIP path without runners:\n%s", b.String())
	}
}

// The runner fields survive the results file, and a file without them
// reads as before.
func TestRunnersRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	if err := w.WriteHeader(&Header{}); err != nil {
		t.Fatal(err)
	}
	in := pathTrial(1, time.Second, 2*time.Second)
	in.Runners = append(in.Runners, Runner{Pod: "runner-b", Node: "node-2", Note: "its clock could not be read"})
	if err := w.WriteTrial(in); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	got := f.Trials[0]
	if len(got.Runners) != 2 || got.Runners[0].IP != "10.244.1.5" || got.Runners[0].SkewUncertaintyNS != 4e5 ||
		got.Runners[1].Note == "" || got.ClusterFailures["refused"] != 1 || got.Runners[0].Key() != "runner-a/node-1" {
		t.Errorf("round trip: %+v", got.Runners)
	}
	if s, ok := got.StageKey(StageClusterLastRouted, "runner-a/node-1"); !ok || s.Offset() != 2*time.Second {
		t.Errorf("cluster_last_routed %+v", s)
	}
	if h := f.Header; h.Schema != SchemaVersion || SchemaVersion != 2 {
		t.Errorf("schema %d: runner fields are additive within version 2", h.Schema)
	}
}

// The gRPC DNS client is a path of its own beside the ingress: a run with it
// and no runners still gets the side-by-side table, and the path that ended
// last in each trial is counted among the paths that trial timed.
func TestPathsDNSGRPC(t *testing.T) {
	ms := time.Millisecond
	trial := func(n int, ingress, grpc time.Duration) *Record {
		r := rec(st(StageSliceNotReady, "", 50*ms), st(StagePrestopCalled, "", 10*ms), st(StageSigterm, "", 15*ms),
			st(StageClientLastRouted, "", ingress), st(StageLastAccept, "10.244.0.1", ingress-2*ms),
			st(StageLastRequest, "", max(ingress, grpc)-ms))
		r.Trial = n
		r.GRPC = &GRPCTrial{End: GRPCEndGoaway}
		if grpc > 0 {
			r.Stages = append(r.Stages, st(StageGRPCLastRouted, "", grpc))
		}
		return r
	}
	s := NewSummary(nil, Options{})
	s.Add(trial(1, 3*time.Second, 9*time.Second))
	s.Add(trial(2, 2*time.Second, 8*time.Second))
	s.Add(trial(3, 4*time.Second, 0)) // the client did not call this pod
	s.Close()
	d := s.Doc()
	if len(d.Paths) != 2 || d.Paths[1].Path != PathDNSGRPC || d.Paths[1].Stage != StageGRPCLastRouted {
		t.Fatalf("paths = %+v, want ingress and dns-grpc", d.Paths)
	}
	in, g := d.Paths[0], d.Paths[1]
	if g.Latest != 2 || g.Compared != 2 || in.Latest != 0 || in.Compared != 2 || g.Last.N != 2 || g.ProbeLast.N != 0 {
		t.Errorf("dns-grpc %+v, ingress %+v; want dns-grpc last in 2 of 2, n 2, no probe column", g, in)
	}
	if p, sentence := d.SetsWindow(); p != PathDNSGRPC || !strings.Contains(sentence, "2 of 2") || !strings.Contains(sentence, "no preStop") {
		t.Errorf("SetsWindow = %s %q", p, sentence)
	}
	if d.GRPCEnds[GRPCEndGoaway] != 2 || len(d.GRPCEnds) != 1 {
		t.Errorf("grpc ends %v, want goaway in the 2 trials the client called the pod", d.GRPCEnds)
	}
	var b bytes.Buffer
	if err := Reporters["text"](s)(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "dns-grpc") || !strings.Contains(out, "GOAWAY 2×") {
		t.Errorf("text report lacks the dns-grpc path or its ends:\n%s", out)
	}
}
