package measure

import (
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/results"
)

// The record names how the connection of the last call ended, and the
// last call is grpc_last_routed with the call's round trip as uncertainty.
func TestGRPCTrialRecord(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const addr = "10.244.1.7:8081"
	log := load.GRPCLog{
		Resolutions: []load.Resolution{{At: at(-9000), Addrs: []string{addr, "10.244.2.3:8081"}}, {At: at(1500), Addrs: []string{"10.244.2.3:8081"}}},
		ResolveNow:  []time.Time{at(1400)},
		Conns: []load.GRPCConn{
			{ID: 1, Addr: addr, Dialed: at(-9000), Ended: at(1400), GoAway: at(1399), GoAwayCode: "NO_ERROR", End: load.ConnEndGoaway},
			{ID: 2, Addr: addr, Dialed: at(1401), Ended: at(1501), End: load.ConnEndClient},
		},
	}
	in := &grpcInput{called: true, log: log, failures: map[string]int{"grpc_unavailable": 1},
		last: load.PodStats{Pod: "p", LastSent: at(1450), Last: at(1452), Addr: addr}}
	var stages []results.Stage
	add := func(name, key string, a time.Time, unc time.Duration, c results.Clock) {
		stages = append(stages, results.Stage{Name: name, At: a, UncertaintyNS: int64(unc), Clock: c})
	}
	gt := grpcTrial(in, t0, time.Time{}, add)
	if gt.End != results.GRPCEndDNS || !gt.ResolvedOut.Equal(at(1500)) || gt.Resolutions != 1 || !gt.ConnEnded.Equal(at(1501)) {
		t.Errorf("record %+v, want the client's own close after the answer at +1.5s", gt)
	}
	if !strings.Contains(gt.Mechanism, "GOAWAY (NO_ERROR") {
		t.Errorf("mechanism %q, want the GOAWAY that made the client ask DNS", gt.Mechanism)
	}
	if len(stages) != 1 || stages[0].Name != results.StageGRPCLastRouted || !stages[0].At.Equal(at(1452)) ||
		stages[0].UncertaintyNS != int64(2*time.Millisecond) {
		t.Errorf("stages %+v, want grpc_last_routed at +1.452s ±2ms", stages)
	}

	// A GOAWAY on the last call's connection: the drain's from drainFrom
	// on, MaxConnectionAge's before.
	in.log.Conns[1] = load.GRPCConn{ID: 2, Addr: addr, Dialed: at(1401), Ended: at(1600), GoAway: at(1599), GoAwayCode: "NO_ERROR", End: load.ConnEndGoaway}
	for drain, want := range map[int]string{1500: "drained before its exit", 1700: "MaxConnectionAge"} {
		if gt := grpcTrial(in, t0, at(drain), add); gt.End != results.GRPCEndGoaway || !strings.Contains(gt.Mechanism, want) {
			t.Errorf("drain from +%dms: %+v, want %q", drain, gt, want)
		}
	}

	// No call to the pod during the trial: no stage, and the record says so.
	stages = nil
	in.last.Last, in.last.LastSent = at(-5000), at(-5001)
	if gt := grpcTrial(in, t0, time.Time{}, add); len(stages) != 0 || gt.End != "" || !strings.Contains(gt.Mechanism, "before T0") {
		t.Errorf("a pod not called in the trial: %+v, stages %v", gt, stages)
	}
}

// A runner's gRPC client: its last call to the pod and its log are on the
// runner's clock; the record puts them on the tool's with the runner's skew
// (grpc_last_routed keyed by the runner, the skew bound added to its
// uncertainty) and judges the GOAWAY against the probe's drain there.
func TestRunnerGRPCRecord(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const offset, unc = 300 * time.Millisecond, 4 * time.Millisecond
	const addr = "10.244.1.7:8081"
	onRunner := func(d time.Duration) time.Time { return at(d + offset) }
	st := runnerStateAt("load-a", "node-1", "10.244.9.9", "probe-x", offset, unc, at(1000*ms), at(1001*ms))
	st.stats.GRPCClient = &load.GRPCClientStats{
		Failures: map[string]int{"grpc_unavailable": 2},
		Pods:     []load.PodReport{{Pod: "probe-x", Responses: 9, LastSent: onRunner(2000 * ms), Last: onRunner(2003 * ms), Addr: addr}},
		Log: load.GRPCLog{Conns: []load.GRPCConn{{ID: 1, Addr: addr, Dialed: onRunner(-5000 * ms), Ended: onRunner(2100 * ms),
			GoAway: onRunner(2099 * ms), GoAwayCode: "NO_ERROR", End: load.ConnEndGoaway}}},
	}
	st.grpcBefore = map[string]int{"grpc_unavailable": 1}
	rec := &results.Record{T0: t0}
	clusterStages(rec, []*runnerState{st}, "probe-x", 50*ms, at(2050*ms))

	s, ok := rec.StageKey(results.StageGRPCLastRouted, "load-a/node-1")
	if !ok || !s.At.Equal(at(2003*ms)) || s.UncertaintyNS != int64(unc+3*ms) || s.Clock != results.ClockRunner {
		t.Fatalf("grpc_last_routed %+v (found %v), want +2.003s on the tool's clock ±7ms", s, ok)
	}
	g := rec.Runners[0].GRPC
	if g == nil || g.End != results.GRPCEndGoaway || !strings.Contains(g.Mechanism, "drained") ||
		!g.ConnEnded.Equal(at(2100*ms)) || g.Failures["grpc_unavailable"] != 1 {
		t.Errorf("runner grpc record %+v: want the drain's GOAWAY at +2.1s on the tool's clock and 1 failure in the trial", g)
	}
}
