package measure

import (
	"maps"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

func newPod(uid, ip, node string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + uid, UID: types.UID(uid)}}
	p.Spec.NodeName = node
	p.Status.PodIP = ip
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

func readySlice(ip string, ready bool) []*discoveryv1.EndpointSlice {
	return []*discoveryv1.EndpointSlice{{AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}}
}

// TestStartupsFollowNewPods: the watch's events for a new pod stamp its
// stages at their first sighting; pods that existed at arm are not new.
func TestStartupsFollowNewPods(t *testing.T) {
	s := newStartups()
	old := newPod("old", "10.244.0.2", "node-0", true)
	noSlices := func() []*discoveryv1.EndpointSlice { return nil }
	s.podEvent(at(0), newPod("early", "", "", false), false, noSlices) // before arm: ignored
	s.arm([]*corev1.Pod{old})
	s.podEvent(at(10), old, false, noSlices)

	s.podEvent(at(100), newPod("new", "", "", false), false, noSlices)
	s.podEvent(at(150), newPod("new", "", "node-0", false), false, noSlices)
	// The address becomes known while the cached slices list it not ready.
	s.podEvent(at(300), newPod("new", "10.244.0.9", "node-0", false), false,
		func() []*discoveryv1.EndpointSlice { return readySlice("10.244.0.9", false) })
	s.sliceEvent(at(320), readySlice("10.244.0.9", false))
	s.podEvent(at(1400), newPod("new", "10.244.0.9", "node-0", true), false, noSlices)
	s.sliceEvent(at(1410), readySlice("10.244.0.9", true))
	s.sliceEvent(at(1500), readySlice("10.244.0.9", true)) // later events keep the first
	s.podEvent(at(1600), newPod("new", "10.244.0.9", "node-0", true), false, noSlices)

	if _, ok := s.claim(at(101)); ok {
		t.Fatal("claimed a pod created before notBefore")
	}
	uid, ok := s.claim(at(0))
	if !ok || uid != "new" {
		t.Fatalf("claim = %q %v, want the new pod", uid, ok)
	}
	if _, ok := s.claim(at(0)); ok {
		t.Fatal("claimed the same pod twice")
	}
	sw, ok := s.snapshot(uid)
	if !ok {
		t.Fatal("no snapshot of the claimed pod")
	}
	for _, c := range []struct {
		name      string
		got, want time.Time
	}{
		{"created", sw.created, at(100)}, {"scheduled", sw.scheduled, at(150)},
		{"ready", sw.ready, at(1400)}, {"sliceReady", sw.sliceReady, at(1410)},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s = %s, want %s", c.name, c.got, c.want)
		}
	}
	if sw.addr != netip.MustParseAddr("10.244.0.9") {
		t.Errorf("addr = %s", sw.addr)
	}
	// A claimed pod survives its deletion until the trial drops it.
	s.podEvent(at(2000), newPod("new", "10.244.0.9", "node-0", true), true, noSlices)
	if _, ok := s.snapshot(uid); !ok {
		t.Error("claimed pod forgotten at its deletion")
	}
	s.drop(uid)
	if _, ok := s.snapshot(uid); ok {
		t.Error("dropped pod still followed")
	}
}

// TestStartupsClaimInCreationOrder: a rollout pairs its k-th deletion with
// the k-th new pod; an unclaimed pod deleted is forgotten.
func TestStartupsClaimInCreationOrder(t *testing.T) {
	s := newStartups()
	s.arm(nil)
	none := func() []*discoveryv1.EndpointSlice { return nil }
	s.podEvent(at(200), newPod("b", "", "", false), false, none)
	s.podEvent(at(100), newPod("a", "", "", false), false, none)
	s.podEvent(at(300), newPod("gone", "", "", false), false, none)
	s.podEvent(at(310), newPod("gone", "", "", false), true, none)
	for _, want := range []types.UID{"a", "b"} {
		if got, ok := s.claim(time.Time{}); !ok || got != want {
			t.Fatalf("claim = %q %v, want %q", got, ok, want)
		}
	}
	if got, ok := s.claim(time.Time{}); ok {
		t.Fatalf("claimed %q, a pod deleted before any trial claimed it", got)
	}
}

// completeStartup is a replacement seen from creation to first request; its
// probe's clock runs 2 s ahead, known to ±1 ms.
func completeStartup() startupInput {
	pod := func(ms int) *time.Time { return atp(2000 + ms) }
	return startupInput{
		watch: startupWatch{pod: "probe-new", uid: "new", addr: netip.MustParseAddr("10.244.0.12"),
			created: at(20), scheduled: at(25), ready: at(3100), sliceReady: at(3110)},
		observer: upstream.KindSkipper,
		appearances: []upstream.Appearance{
			{Observer: "skipper", Replica: "r0", Resolution: 500 * time.Millisecond,
				LastAbsent: upstream.Reading{Sent: at(5000), At: at(5004)}, FirstPresent: upstream.Reading{Sent: at(5500), At: at(5503)}},
			{Observer: "skipper", Replica: "r1", Resolution: 500 * time.Millisecond,
				LastAbsent: upstream.Reading{Sent: at(5800), At: at(5804)}, FirstPresent: upstream.Reading{Sent: at(6300), At: at(6302)}},
			// First reading already listed it: no arrival instant.
			{Observer: "skipper", Replica: "r2", Resolution: 500 * time.Millisecond,
				FirstPresent: upstream.Reading{Sent: at(7000), At: at(7001)}},
		},
		timeline: &probe.Timeline{Version: 1, Started: *pod(60), ListenerOpen: pod(3060), FirstTrafficRequest: pod(5510)},
		skew:     load.Estimate{Offset: 2 * time.Second, Uncertainty: time.Millisecond, Samples: 10},
		skewOK:   true,
		client:   load.PodStats{Pod: "probe-new", FirstSent: at(5508), First: at(5512)},
		clientOK: true,
	}
}

func TestAddStartup(t *testing.T) {
	rec := &results.Record{T0: t0, Pod: "probe-old"}
	addStartup(rec, completeStartup())
	if rec.NewPod != "probe-new" || rec.NewPodIP != "10.244.0.12" {
		t.Errorf("new pod = %q %q", rec.NewPod, rec.NewPodIP)
	}
	want := []struct {
		name, key string
		off, unc  time.Duration
		clk       results.Clock
	}{
		{results.StagePodCreated, "", 20 * time.Millisecond, 0, results.ClockTool},
		{results.StagePodScheduled, "", 25 * time.Millisecond, 0, results.ClockTool},
		{results.StageContainerStarted, "", 60 * time.Millisecond, time.Millisecond, results.ClockPod},
		{results.StageListenerOpen, "", 3060 * time.Millisecond, time.Millisecond, results.ClockPod},
		{results.StagePodReadyCondition, "", 3100 * time.Millisecond, 0, results.ClockTool},
		{results.StageSliceReady, "", 3110 * time.Millisecond, 0, results.ClockTool},
		{results.StageUpstreamPresent, "skipper/r0", 5503 * time.Millisecond, 503 * time.Millisecond, results.ClockTool},
		{results.StageFirstRequest, "", 5510 * time.Millisecond, time.Millisecond, results.ClockPod},
		{results.StageClientFirstRouted, "", 5512 * time.Millisecond, 4 * time.Millisecond, results.ClockTool},
		{results.StageUpstreamPresent, "skipper/r1", 6302 * time.Millisecond, 502 * time.Millisecond, results.ClockTool},
	}
	if len(rec.Stages) != len(want) {
		t.Fatalf("got %d stages %+v, want %d", len(rec.Stages), rec.Stages, len(want))
	}
	for i, w := range want {
		s := rec.Stages[i]
		if s.Name != w.name || s.Key != w.key || s.Offset() != w.off || time.Duration(s.UncertaintyNS) != w.unc || s.Clock != w.clk {
			t.Errorf("stage %d = %s[%s] %s ±%s %s, want %s[%s] %s ±%s %s", i, s.Name, s.Key, s.Offset(),
				time.Duration(s.UncertaintyNS), s.Clock, w.name, w.key, w.off, w.unc, w.clk)
		}
	}
	// The latest replica's listing is the stage's value.
	if d, ok := rec.Between(results.StagePodReadyCondition, results.StageUpstreamPresent); !ok || d != 3202*time.Millisecond {
		t.Errorf("pod_ready_condition→upstream_present = %s %v, want 3.202s", d, ok)
	}
}

func TestAddStartupPartial(t *testing.T) {
	in := completeStartup()
	in.skewOK = false               // pod-clock stages cannot be placed
	in.observer = upstream.KindNone // no upstream stages
	in.clientOK = false
	rec := &results.Record{T0: t0}
	addStartup(rec, in)
	for _, s := range rec.Stages {
		switch s.Name {
		case results.StagePodCreated, results.StagePodScheduled, results.StagePodReadyCondition, results.StageSliceReady:
		default:
			t.Errorf("unexpected stage %s without skew, observer or load", s.Name)
		}
	}
	// An older probe without listener_open listened at its start.
	in = completeStartup()
	in.timeline.ListenerOpen = nil
	rec = &results.Record{T0: t0}
	addStartup(rec, in)
	if d, ok := rec.Offset(results.StageListenerOpen); !ok || d != 60*time.Millisecond {
		t.Errorf("listener_open = %s %v, want the start, 60ms", d, ok)
	}
}

// failureCounter counts failures scheduled at the given instants, by kind,
// in [from, to), as load.Generator.Failures does.
func failureCounter(events map[time.Time]string) func(from, to time.Time) map[string]int {
	return func(from, to time.Time) map[string]int {
		out := map[string]int{}
		for at, k := range events {
			if !at.Before(from) && at.Before(to) {
				out[k]++
			}
		}
		return out
	}
}

func TestSplitFailures(t *testing.T) {
	// Shutdown failures right after T0; the new pod is routed from 1.0 s
	// (slice_ready) but listens only from 3.0 s (±1 ms): 502s at 1.5 s and
	// 2.9 s are its startup's.
	events := map[time.Time]string{at(100): "status_502", at(1500): "status_502", at(2900): "refused", at(3500): "status_502"}
	for _, tc := range []struct {
		name             string
		sliceReady       int
		listen           int
		end              int
		wantTrial, wantS map[string]int
	}{
		{"routed before listening", 1000, 3000, 6000,
			map[string]int{"status_502": 2}, map[string]int{"status_502": 1, "refused": 1}},
		{"readiness probe: listening before routed", 3100, 3000, 6000,
			map[string]int{"status_502": 3, "refused": 1}, nil},
		{"startup span outlasts the trial", 1000, 3000, 2000,
			map[string]int{"status_502": 1}, map[string]int{"status_502": 1, "refused": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := failureCounter(events)
			rec := &results.Record{T0: t0, ClientFailures: count(at(0), at(tc.end)), Stages: []results.Stage{
				{Name: results.StageSliceReady, At: at(tc.sliceReady)},
				{Name: results.StageListenerOpen, At: at(tc.listen), UncertaintyNS: int64(time.Millisecond)},
			}}
			splitFailures(rec, at(0), at(tc.end), count)
			if !maps.Equal(rec.ClientFailures, tc.wantTrial) {
				t.Errorf("client failures = %v, want %v", rec.ClientFailures, tc.wantTrial)
			}
			if !maps.Equal(rec.StartupFailures, tc.wantS) {
				t.Errorf("startup failures = %v, want %v", rec.StartupFailures, tc.wantS)
			}
		})
	}
}
