package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// cluster is the package's local cluster, started once in TestMain.
var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e", localcluster.Options{IngressPoll: time.Second}, func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// baseConfig is a quick valid run of 5 trials.
func baseConfig(t *testing.T) measure.Config {
	t.Helper()
	cfg := e2etest.Config(t, cluster, adminClient(t))
	cfg.Trials = 5
	return cfg
}

func run(t *testing.T, cfg measure.Config) *e2etest.Sink {
	t.Helper()
	sink := e2etest.NewSink()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := measure.Run(ctx, cfg, sink, func(p measure.Progress) {
		if p.Phase == "trial" && p.Stage == "released" || p.Phase == "setup" || p.Phase == "cleanup" {
			t.Logf("%s trial %d/%d %s %s", p.Phase, p.Trial, p.Trials, p.Stage, p.Message)
		}
	}); err != nil {
		t.Fatalf("measure.Run: %v", err)
	}
	if len(sink.Records) != cfg.Trials {
		t.Fatalf("got %d trial records, want %d", len(sink.Records), cfg.Trials)
	}
	return sink
}

func offset(t *testing.T, r *results.Record, stage string) time.Duration {
	t.Helper()
	d, ok := r.Offset(stage)
	if !ok {
		t.Fatalf("trial %d: no %s stage (stages: %v)", r.Trial, stage, stageNames(r))
	}
	return d
}

func stageNames(r *results.Record) []string {
	var out []string
	for _, s := range r.Stages {
		out = append(out, s.Name+"["+s.Key+"]")
	}
	return out
}

// checkStartup requires every startup stage of the trial's replacement, in
// causal order. Pod-clock stages may lead tool-clock ones by their skew
// bound, and the watch delivers a change ~ms after it happened (20 ms, as
// above).
func checkStartup(t *testing.T, r *results.Record) {
	t.Helper()
	if r.NewPod == "" || r.NewPod == r.Pod {
		t.Errorf("trial %d: replacement %q (deleted %q)", r.Trial, r.NewPod, r.Pod)
		return
	}
	slack := time.Duration(r.SkewUncertaintyNS) + 20*time.Millisecond
	order := []string{results.StagePodCreated, results.StagePodScheduled, results.StageContainerStarted, results.StageListenerOpen,
		results.StagePodReadyCondition, results.StageSliceReady, results.StageUpstreamPresent}
	for i := 1; i < len(order); i++ {
		if a, b := offset(t, r, order[i-1]), offset(t, r, order[i]); b < a-slack {
			t.Errorf("trial %d: %s %s before %s %s", r.Trial, order[i], b, order[i-1], a)
		}
	}
	// Any ingress replica may route before the last one lists the pod, so
	// the first request and response only follow its readiness.
	if a, b := offset(t, r, results.StageListenerOpen), offset(t, r, results.StageFirstRequest); b < a-slack {
		t.Errorf("trial %d: first_request %s before listener_open %s", r.Trial, b, a)
	}
	if a, b := offset(t, r, results.StageSliceReady), offset(t, r, results.StageClientFirstRouted); b < a-slack {
		t.Errorf("trial %d: client_first_routed %s before slice_ready %s", r.Trial, b, a)
	}
	if len(r.StartupFailures) > 0 {
		t.Errorf("trial %d: startup failures %v behind a readiness probe", r.Trial, r.StartupFailures)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// The run the other checks build on: every trial valid, every stage there,
// in causal order, and the results stream decoding to the same records.
func TestMeasureOnLocalCluster(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Trials = 10
	sink := run(t, cfg)

	resolution := cfg.ObserverOptions.Interval
	var sigterm, prestop []time.Duration
	for _, r := range sink.Records {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			continue
		}
		for _, st := range []string{results.StageDeleteSent, results.StageDeleteAcked, results.StagePodTerminatingSeen,
			results.StageServerDeleteTime, results.StageSliceNotReady, results.StageSliceNotServing, results.StageSliceRemoved,
			results.StageUpstreamLastSeen, results.StageUpstreamRemoved, results.StagePrestopCalled, results.StageSigterm,
			results.StageLastAccept, results.StageLastRequest, results.StageClientLastRouted, results.StageContainerExit,
			results.StagePodDeleted} {
			offset(t, r, st)
		}
		notReady := offset(t, r, results.StageSliceNotReady)
		removed := offset(t, r, results.StageUpstreamRemoved)
		end, _ := r.TrafficEnd()
		if notReady < 0 {
			t.Errorf("trial %d: slice_not_ready %s before T0", r.Trial, notReady)
		}
		// upstream_removed is when the observer's answer arrived; Skipper
		// can only have dropped the address after the slice changed, and our
		// own watch stamps that change late by its delivery (~ms), so allow
		// 20 ms of watch-delivery lag before calling the order broken.
		if removed < notReady-20*time.Millisecond {
			t.Errorf("trial %d: upstream_removed %s before slice_not_ready %s", r.Trial, removed, notReady)
		}
		// New traffic can reach the pod only while Skipper still lists it:
		// the last accept/request lies before the removal was observed, up
		// to one poll of the observer and the skew bound of the pod clock.
		slack := resolution + time.Duration(r.SkewUncertaintyNS)
		if end > removed+slack {
			t.Errorf("trial %d: traffic end %s after upstream_removed %s + %s", r.Trial, end, removed, slack)
		}
		if p, s := offset(t, r, results.StagePrestopCalled), offset(t, r, results.StageSigterm); p > s {
			t.Errorf("trial %d: prestop_called %s after sigterm %s", r.Trial, p, s)
		}
		if e, d := offset(t, r, results.StageContainerExit), offset(t, r, results.StagePodDeleted); e > d+time.Duration(r.SkewUncertaintyNS) {
			t.Errorf("trial %d: container_exit %s after pod_deleted %s", r.Trial, e, d)
		}
		sigterm = append(sigterm, offset(t, r, results.StageSigterm))
		prestop = append(prestop, offset(t, r, results.StagePrestopCalled))
		checkStartup(t, r)
	}

	// The stream decodes back to the same records.
	file, err := results.Decode(bytes.NewReader(sink.Encoded.Bytes()))
	if err != nil {
		t.Fatalf("decode results: %v", err)
	}
	if len(file.Trials) != len(sink.Records) {
		t.Fatalf("decoded %d trials, wrote %d", len(file.Trials), len(sink.Records))
	}
	for i := range file.Trials {
		want, _ := json.Marshal(sink.Records[i])
		got, _ := json.Marshal(&file.Trials[i])
		if !bytes.Equal(got, want) {
			t.Errorf("trial %d does not round-trip:\n got %s\nwant %s", i+1, got, want)
		}
	}
	if t.Failed() {
		return
	}

	t.Run("skew correction", func(t *testing.T) {
		// Every probe reports its clock 2 s ahead. The skew estimate from the
		// response headers must take it out again: the corrected pod-clock
		// stages agree with the honest run's within 20 ms. Both runs' stages
		// are ms-scale reactions of the node agent on an idle machine; 20 ms
		// covers their spread between runs plus each skew bound (< 1 ms on
		// loopback round trips of ~1 ms).
		cfg := baseConfig(t)
		cfg.ProbeClockOffset = 2 * time.Second
		skewed := run(t, cfg)
		var s2, p2 []time.Duration
		for _, r := range skewed.Records {
			if !r.Valid {
				t.Fatalf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			}
			if d := time.Duration(r.SkewNS) - 2*time.Second; d < -20*time.Millisecond || d > 20*time.Millisecond {
				t.Errorf("trial %d: skew estimate %s, want 2s ± 20ms", r.Trial, time.Duration(r.SkewNS))
			}
			s2 = append(s2, offset(t, r, results.StageSigterm))
			p2 = append(p2, offset(t, r, results.StagePrestopCalled))
		}
		for _, c := range []struct {
			name           string
			honest, skewed []time.Duration
		}{{"sigterm", sigterm, s2}, {"prestop_called", prestop, p2}} {
			if d := median(c.skewed) - median(c.honest); d < -20*time.Millisecond || d > 20*time.Millisecond {
				t.Errorf("%s: corrected median %s vs honest %s (diff %s), want within 20ms", c.name, median(c.skewed), median(c.honest), d)
			}
		}
	})

	t.Run("rollout", func(t *testing.T) {
		// One restart of a 3-replica Deployment: the controller replaces
		// every pod, each replaced pod is a trial followed from the watch's
		// first sight of its deletion, overlapping the next.
		cfg := baseConfig(t)
		cfg.Mode, cfg.Trials = measure.ModeRollout, 3
		roll := run(t, cfg)
		for _, r := range roll.Records {
			if !r.Valid {
				t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
				continue
			}
			if r.T0Source != results.StagePodTerminatingSeen {
				t.Errorf("trial %d: T0 source %q, want pod_terminating_seen", r.Trial, r.T0Source)
			}
			if _, ok := r.Stage(results.StageDeleteSent); ok {
				t.Errorf("trial %d: delete_sent recorded, but the tool sent no DELETE in a rollout", r.Trial)
			}
			for _, st := range []string{results.StageSliceNotReady, results.StageUpstreamRemoved, results.StageSigterm, results.StageLastRequest} {
				offset(t, r, st)
			}
			checkStartup(t, r)
			// The Deployment deletes an old pod only once a new one is
			// available (maxUnavailable 0): its replacement came first.
			if c := offset(t, r, results.StagePodReadyCondition); c > 0 {
				t.Errorf("trial %d: replacement Ready %s after the old pod's deletion, want before it in a rollout", r.Trial, c)
			}
		}
	})

	t.Run("broken canary, then the recommendation applied", func(t *testing.T) {
		// The fast-exiting app without preStop: clients see failures. The
		// load is POST: Skipper retries a GET whose connect was refused on
		// another endpoint (proxy/proxy.go retryable: dial errors of
		// requests without a body), which would hide the refused connects
		// that non-idempotent traffic turns into 502s.
		cfg := baseConfig(t)
		cfg.ExitOnSigterm, cfg.PreStop, cfg.LoadMethod = true, false, http.MethodPost
		broken := run(t, cfg)
		failed := 0
		for _, r := range broken.Records {
			for _, n := range r.ClientFailures {
				failed += n
			}
		}
		if failed == 0 {
			t.Fatalf("no client failures over %d deletions of a fast-exiting app without preStop", cfg.Trials)
		}
		t.Logf("broken canary: %d client failures over %d deletions", failed, cfg.Trials)

		// The recommendation from the honest run, applied as a preStop
		// sleep: failures gone from nearly every deletion, and those left
		// explained by the tool's own number. The recommendation covers
		// the 95th percentile of the window (a floor at 10 trials: their
		// largest, plus the margin), so a deletion whose window outlasts
		// the sleep is allowed 1 time in 20 on average; more than 3 of 20
		// such trials has probability 1.6% (Binomial(20, 0.05)) if the
		// recommendation holds, while one that did not cover the window
		// fails most trials (the broken canary above: every one). Each
		// failing trial must show why: the observer still listed the
		// address when the app stopped listening (upstream_removed no
		// earlier than SIGTERM less the observer's resolution), i.e. the
		// window outlasted the sleep and the record says so. A failure
		// the record cannot explain is a wrong number.
		sum := results.NewSummary(sink.Meta, results.Options{})
		for _, r := range sink.Records {
			sum.Add(r)
		}
		sum.Close()
		rec := sum.Doc().Recommendation
		if rec == nil || rec.PreStopSeconds <= 0 {
			t.Fatalf("no recommendation from the honest run: %+v", rec)
		}
		cfg = baseConfig(t)
		cfg.ExitOnSigterm, cfg.PreStop, cfg.PreStopSleep = true, true, time.Duration(rec.PreStopSeconds)*time.Second
		cfg.LoadMethod = http.MethodPost
		cfg.Trials = 20
		fixed := run(t, cfg)
		failed = 0
		failing := 0
		res := fixed.Meta.WorstResolution()
		for _, r := range fixed.Records {
			if len(r.ClientFailures) == 0 {
				continue
			}
			failing++
			for _, n := range r.ClientFailures {
				failed += n
			}
			removed, okR := r.Offset(results.StageUpstreamRemoved)
			sig, okS := r.Offset(results.StageSigterm)
			t.Logf("trial %d: failures %v with preStop sleep %ds; upstream_removed %s (ok %v), sigterm %s (ok %v), observer resolution %s",
				r.Trial, r.ClientFailures, rec.PreStopSeconds, removed, okR, sig, okS, res)
			if !okR || !okS || removed < sig-res {
				t.Errorf("trial %d: client failures %v, but the record does not show the window outlasting the %ds sleep (upstream_removed %s, sigterm %s, resolution %s)",
					r.Trial, r.ClientFailures, rec.PreStopSeconds, removed, sig, res)
			}
		}
		if failing > 3 {
			t.Errorf("recommended preStop %ds applied: failures in %d of %d deletions, want ≤ 3 (see above)", rec.PreStopSeconds, failing, cfg.Trials)
		}
		t.Logf("recommended preStop %ds applied: %d client failures in %d of %d deletions", rec.PreStopSeconds, failed, failing, cfg.Trials)
	})
}
