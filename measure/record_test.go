package measure

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func atp(ms int) *time.Time { t := at(ms); return &t }

// completeInput is a trial where everything was seen; the probe's clock runs
// 2 s ahead and the skew estimate knows it to ±1 ms.
func completeInput() trialInput {
	pod := func(ms int) *time.Time { return atp(2000 + ms) }
	return trialInput{
		trial: 3, pod: "probe-abc", node: "node-0", addr: netip.MustParseAddr("10.244.0.9"),
		t0: at(0), acked: at(4),
		watch: trialWatch{terminatingSeen: at(6), serverDeleteTime: at(-400), sliceNotReady: at(15), sliceNotServing: at(1020),
			sliceRemoved: at(5020), podDeleted: at(5010)},
		observer: upstream.KindSkipper,
		removals: []upstream.Removal{{Observer: "skipper", Replica: "r0", Resolution: 200 * time.Millisecond,
			LastPresent: upstream.Reading{Sent: at(990), At: at(992)}, Removed: upstream.Reading{Sent: at(1190), At: at(1193)}}},
		timeline: &probe.Timeline{Version: 1, PrestopCalled: pod(9), Sigterm: pod(11), LastTrafficRequest: pod(985), LastTrafficAccept: pod(984),
			Exit: pod(4990), Peers: []probe.Peer{{Addr: "10.244.0.1", LastTrafficAccept: pod(984)}}},
		timelineSource: "termination message",
		skew:           load.Estimate{Offset: 2 * time.Second, Uncertainty: time.Millisecond, Samples: 40},
		skewOK:         true,
		clientLast:     load.PodStats{Pod: "probe-abc", LastSent: at(984), Last: at(987)},
		clientOK:       true,
		maxSkew:        50 * time.Millisecond,
	}
}

func TestBuildRecordComplete(t *testing.T) {
	rec := buildRecord(completeInput())
	if !rec.Valid {
		t.Fatalf("complete trial marked invalid: %s", rec.InvalidReason())
	}
	want := map[string]time.Duration{
		results.StageDeleteSent: 0, results.StageDeleteAcked: 4 * time.Millisecond,
		results.StagePodTerminatingSeen: 6 * time.Millisecond, results.StageServerDeleteTime: -400 * time.Millisecond,
		results.StageSliceNotReady: 15 * time.Millisecond, results.StageSliceNotServing: 1020 * time.Millisecond,
		results.StageSliceRemoved: 5020 * time.Millisecond, results.StagePodDeleted: 5010 * time.Millisecond,
		results.StageUpstreamLastSeen: 992 * time.Millisecond, results.StageUpstreamRemoved: 1193 * time.Millisecond,
		// Pod-clock stages, corrected by the 2 s skew.
		results.StagePrestopCalled: 9 * time.Millisecond, results.StageSigterm: 11 * time.Millisecond,
		results.StageLastRequest: 985 * time.Millisecond, results.StageLastAccept: 984 * time.Millisecond,
		results.StageContainerExit: 4990 * time.Millisecond, results.StageClientLastRouted: 987 * time.Millisecond,
	}
	for name, off := range want {
		got, ok := rec.Offset(name)
		if !ok || got != off {
			t.Errorf("%s = %s (present %v), want %s", name, got, ok, off)
		}
	}
	if len(rec.Stages) != len(want) {
		t.Errorf("%d stages, want %d: %+v", len(rec.Stages), len(want), rec.Stages)
	}
	for _, s := range rec.Stages {
		switch {
		case s.Clock == results.ClockPod && s.UncertaintyNS != int64(time.Millisecond):
			t.Errorf("%s: uncertainty %d, want the skew bound", s.Name, s.UncertaintyNS)
		case s.Name == results.StageUpstreamRemoved && (s.Key != "skipper/r0" || s.UncertaintyNS != int64(203*time.Millisecond)):
			t.Errorf("upstream_removed key %q uncertainty %s, want skipper/r0 and the 203ms bracket", s.Key, time.Duration(s.UncertaintyNS))
		case s.Name == results.StageServerDeleteTime && s.Clock != results.ClockAPIServer:
			t.Errorf("server_delete_time on clock %s", s.Clock)
		}
	}
	if w, _ := rec.Window(); w != 985*time.Millisecond {
		t.Errorf("window %s, want 985ms", w)
	}
	if rec.SkewNS != int64(2*time.Second) {
		t.Errorf("skew %d", rec.SkewNS)
	}
}

func TestBuildRecordInvalid(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*trialInput)
		code   string
		want   string
		// keeps: a point the fault must leave valid; drops: one it must
		// invalidate.
		keeps, drops string
	}{
		{"no skew", func(in *trialInput) { in.skewOK = false }, results.ReasonSkewMissing, "no clock-skew estimate", results.StageSliceNotReady, results.PointWindow},
		{"skew too loose", func(in *trialInput) { in.skew.Uncertainty = 80 * time.Millisecond }, results.ReasonSkewBound, "±80ms exceeds the 50ms allowed", results.StageUpstreamRemoved, results.PointWindow},
		{"no probe record", func(in *trialInput) { in.timeline, in.timelineSource = nil, "connection refused" }, results.ReasonProbeUnreadable, "connection refused", results.StageSliceNotReady, results.StagePrestopCalled},
		{"no slice update", func(in *trialInput) { in.watch.sliceNotReady = time.Time{} }, results.ReasonWatchMissed, "never showed the address not ready", results.PointWindow, results.StageSliceNotServing},
		{"deletion seen on relist", func(in *trialInput) { in.watch.deletedOnRelist = true }, results.ReasonWatchBroken, "relist", results.PointWindow, results.StagePodDeleted},
		{"observer blind", func(in *trialInput) {
			in.removals[0].Removed = upstream.Reading{}
			in.removals[0].Blind = 3
		}, results.ReasonObserverBlind, "went unreadable", results.PointWindow, results.StageUpstreamLastSeen},
		{"observer still listing at the end", func(in *trialInput) { in.removals[0].Removed = upstream.Reading{} }, results.ReasonUpstreamListed, "still listed", results.PointWindow, results.StageUpstreamLastSeen},
		{"observer never listed it", func(in *trialInput) { in.removals = nil }, results.ReasonObserverBlind, "never listed", results.PointWindow, results.StageUpstreamRemoved},
		{"carried reason", func(in *trialInput) {
			in.reasons = []results.Reason{{Code: results.ReasonAPIServerStall, Detail: "the API server did not answer"}}
		}, results.ReasonAPIServerStall, "did not answer", results.PointWindow, results.StagePodTerminatingSeen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := completeInput()
			tt.mutate(&in)
			rec := buildRecord(in)
			if rec.Valid || len(rec.Reasons) != 1 || rec.Reasons[0].Code != tt.code || !strings.Contains(rec.Reasons[0].Detail, tt.want) {
				t.Fatalf("Valid=%v Reasons=%+v, want one %s with %q", rec.Valid, rec.Reasons, tt.code, tt.want)
			}
			if strings.Contains(rec.Reasons[0].Detail, "--") {
				t.Errorf("detail %q names a flag", rec.Reasons[0].Detail)
			}
			if !rec.PointValid(tt.keeps) || rec.PointValid(tt.drops) {
				t.Errorf("%s: %s valid %v (want true), %s valid %v (want false)", tt.code, tt.keeps, rec.PointValid(tt.keeps), tt.drops, rec.PointValid(tt.drops))
			}
		})
	}
}

func TestBuildRecordKubeletExitFallback(t *testing.T) {
	in := completeInput()
	in.timeline.Exit = nil
	in.exitByKubelet = &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(at(5000))}
	rec := buildRecord(in)
	s, ok := rec.Stage(results.StageContainerExit)
	if !ok || s.Clock != results.ClockKubelet || s.UncertaintyNS != int64(time.Second) {
		t.Fatalf("container_exit = %+v, %v; want the kubelet's finishedAt at 1 s resolution", s, ok)
	}
}
