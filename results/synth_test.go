package results

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"time"
)

// synthSpec shapes a synthetic run. The numbers are test input drawn from
// chosen distributions, not measurements.
type synthSpec struct {
	seed    uint64
	trials  int
	poll    time.Duration // the ingress's poll interval: upstream_removed lags slice_not_ready by U(0, poll)
	extra   time.Duration // added to upstream_removed (a known shift)
	invalid map[int]Reason
	// hold, when set, cuts every trial whose traffic would go on past it:
	// the trial is censored there (hold_reached).
	hold time.Duration
	// noPrestop drops prestop_called (no preStop hook configured).
	noPrestop bool
}

var synthStart = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

func synthHeader(spec synthSpec) *Header {
	return &Header{
		Kind: KindHeader, Schema: SchemaVersion, ToolVersion: "v0.1.0-test", StartedAt: synthStart,
		ServerVersion: "v1.37.2", Cluster: "local",
		Ingress: Ingress{Class: "skipper", Controller: "skipper", Version: "v0.27.57",
			Settings: map[string]string{"source-poll-timeout": fmt.Sprint(spec.poll.Milliseconds())}},
		Observers: []Observer{{Name: "skipper", ResolutionNS: int64(250 * time.Millisecond)}},
		Mode:      "delete", Namespace: "epwindow-test", Replicas: 3, Rate: 50, DrainNS: int64(2 * time.Second),
		Flags: map[string]string{"trials": fmt.Sprint(spec.trials)}, HoldNS: int64(cmp.Or(spec.hold, time.Minute)),
	}
}

func synthTrials(spec synthSpec) []Record {
	rng := rand.New(rand.NewPCG(spec.seed, 7))
	u := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var out []Record
	for i := 1; i <= spec.trials; i++ {
		t0 := synthStart.Add(time.Duration(i) * 30 * time.Second)
		r := Record{
			Kind: KindTrial, Trial: i, Pod: fmt.Sprintf("probe-%03d", i), Node: "node-1",
			PodIP: fmt.Sprintf("10.244.0.%d", 10+i), Valid: true, T0: t0,
			SkewNS: int64(u(-2*time.Millisecond, 2*time.Millisecond)), SkewUncertaintyNS: int64(u(100*time.Microsecond, 900*time.Microsecond)),
		}
		if reason, bad := spec.invalid[i]; bad {
			r.Valid, r.Reasons = false, append(r.Reasons, reason)
		}
		add := func(name, key string, off time.Duration, unc time.Duration, clk Clock) {
			r.Stages = append(r.Stages, Stage{Name: name, Key: key, At: t0.Add(off), OffsetNS: int64(off), UncertaintyNS: int64(unc), Clock: clk})
		}
		add(StageDeleteSent, "", 0, 0, ClockTool)
		add(StageDeleteAcked, "", u(5*time.Millisecond, 20*time.Millisecond), 0, ClockTool)
		add(StagePodTerminatingSeen, "", u(4*time.Millisecond, 15*time.Millisecond), 0, ClockTool)
		add(StageServerDeleteTime, "", -u(0, 999*time.Millisecond), time.Second, ClockAPIServer)
		snr := u(15*time.Millisecond, 60*time.Millisecond)
		if rng.IntN(10) == 0 { // the controller's stale-cache retry
			snr += time.Second
		}
		add(StageSliceNotReady, "", snr, 0, ClockTool)
		res := 250 * time.Millisecond
		latest := time.Duration(0)
		cut := false
		for _, rep := range []string{"skipper/skipper-0", "skipper/skipper-1"} {
			ur := snr + u(0, spec.poll) + spec.extra + u(0, res)
			if spec.hold > 0 && ur > spec.hold {
				// still listed when the hold ended the trial
				cut = true
				add(StageUpstreamLastSeen, rep, spec.hold-res/2, res, ClockTool)
				r.Reasons = append(r.Reasons, Reason{Code: ReasonUpstreamListed, Detail: "upstream " + rep + " still listed the address at its last poll"})
				continue
			}
			latest = max(latest, ur)
			add(StageUpstreamLastSeen, rep, ur-res, res, ClockTool)
			add(StageUpstreamRemoved, rep, ur, res, ClockTool)
		}
		if cut {
			latest = spec.hold
			r.Valid = false
			r.Reasons = append(r.Reasons, Reason{Code: ReasonHoldReached, Detail: fmt.Sprintf("traffic or an upstream listing went on past the hold (%s)", spec.hold)})
		}
		pre := u(20*time.Millisecond, 80*time.Millisecond)
		if !spec.noPrestop {
			add(StagePrestopCalled, "", pre, time.Duration(r.SkewUncertaintyNS), ClockPod)
		}
		add(StageSigterm, "", pre+u(time.Millisecond, 5*time.Millisecond), time.Duration(r.SkewUncertaintyNS), ClockPod)
		la := latest - u(0, 200*time.Millisecond)
		add(StageLastAccept, "10.244.0.2", la, time.Duration(r.SkewUncertaintyNS), ClockPod)
		add(StageLastAccept, "10.244.0.3", la-u(0, 500*time.Millisecond), time.Duration(r.SkewUncertaintyNS), ClockPod)
		lr := la + u(0, 3*time.Millisecond)
		add(StageLastRequest, "", lr, time.Duration(r.SkewUncertaintyNS), ClockPod)
		add(StageClientLastRouted, "", lr+u(time.Millisecond, 4*time.Millisecond), 0, ClockTool)
		add(StageSliceNotServing, "", snr+u(time.Second, 2*time.Second), 0, ClockTool)
		exit := latest + 3*time.Second + u(0, 100*time.Millisecond)
		add(StageContainerExit, "", exit, time.Duration(r.SkewUncertaintyNS), ClockPod)
		add(StageSliceRemoved, "", exit+u(20*time.Millisecond, 80*time.Millisecond), 0, ClockTool)
		add(StagePodDeleted, "", exit+u(30*time.Millisecond, 90*time.Millisecond), 0, ClockTool)
		if i%7 == 0 {
			r.ClientFailures = map[string]int{"status_502": 1}
		}
		out = append(out, r)
	}
	return out
}

func synthSummary(spec synthSpec) *Summary {
	s := NewSummary(synthHeader(spec), Options{})
	for _, r := range synthTrials(spec) {
		s.Add(&r)
	}
	s.Close()
	return s
}
