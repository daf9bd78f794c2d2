package startup

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// withCluster starts the local cluster with Skipper polling every poll, runs
// f on it and stops it. Skipper's poll is a flag of its process, fixed for a
// cluster's life, so the two poll values need two starts (~5 s each); every
// other check rides on one of them.
func withCluster(t *testing.T, poll time.Duration, f func(t *testing.T, c *localcluster.Cluster, client kubernetes.Interface)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{IngressPoll: poll})
	if err != nil {
		t.Fatalf("start the local cluster with Skipper polling every %s: %v", poll, err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the local cluster: %v", err)
		}
	}()
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	f(t, c, client)
}

// config is a quick run through Skipper polling every poll: the deletions
// spread over one poll period (--trial-jitter), so the replacements turn
// Ready at every phase of Skipper's poll rather than at the one phase the
// trial loop's own pacing would pick.
func config(t *testing.T, c *localcluster.Cluster, client kubernetes.Interface, poll time.Duration, trials int) measure.Config {
	cfg := e2etest.Config(t, c, client)
	cfg.Trials = trials
	cfg.QuietPeriod = time.Second
	cfg.TrialJitter = poll
	return cfg
}

func run(t *testing.T, cfg measure.Config) *e2etest.Sink {
	t.Helper()
	sink := e2etest.NewSink()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := measure.Run(ctx, cfg, sink, func(p measure.Progress) {
		if p.Phase == "trial" && p.Stage == "released" || p.Phase == "setup" {
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

func between(t *testing.T, r *results.Record, from, to string) time.Duration {
	t.Helper()
	d, ok := r.Between(from, to)
	if !ok {
		var names []string
		for _, s := range r.Stages {
			names = append(names, s.Name+"["+s.Key+"]")
		}
		t.Fatalf("trial %d: no %s→%s (new pod %q, stages %v)", r.Trial, from, to, r.NewPod, names)
	}
	return d
}

// readyToUpstream checks pod_ready_condition → upstream_present of every
// trial against Skipper's poll, and returns them.
//
// Skipper's kubernetes data client is polled by routing/datasource.go
// (receiveFromClient): sleep -source-poll-timeout, then LoadUpdate, which
// re-reads the Ingresses, Services and EndpointSlices from the API server
// (dataclients/kubernetes/clusterclient.go, fetchClusterState) and hands the
// changed routes to the route table. A pod that turns Ready is therefore in
// the table at most one sleep plus two LoadUpdates (the one under way when
// the slice changed may have read it just before) plus the table's rebuild
// after its Ready transition. Our observer reads /routes every 200 ms:
// upstream_present is the answer of the first poll that lists it, at most one
// observer interval plus that request's round trip after the change, and
// the trial records exactly that bracket as the stage's uncertainty. So
//
//	0 − 20 ms ≤ ready → upstream_present ≤ poll + bracket + 200 ms
//
// where 20 ms is our watch's delivery of the Ready update (Skipper cannot
// list the address before the EndpointSlice controller wrote it, which is
// after the pod's status write) and 200 ms covers the two LoadUpdates —
// three LIST calls each to the API server over loopback — and the rebuild,
// on this shared 2-core machine.
func readyToUpstream(t *testing.T, recs []*results.Record, poll time.Duration) []time.Duration {
	t.Helper()
	var lags []time.Duration
	for _, r := range recs {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.Invalid)
			continue
		}
		lag := between(t, r, results.StagePodReadyCondition, results.StageUpstreamPresent)
		bracket := r.MaxUncertainty(results.StageUpstreamPresent)
		if hi := poll + bracket + 200*time.Millisecond; lag < -20*time.Millisecond || lag > hi {
			t.Errorf("trial %d: pod_ready_condition → upstream_present %s, want within [-20ms, %s] (poll %s + observer bracket %s + 200ms)",
				r.Trial, lag, hi, poll, bracket)
		}
		lags = append(lags, lag)
	}
	return lags
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestStartupOnLocalCluster: the ground truth of the startup stages, and the
// startup race reproduced and recognised.
//
// Trial counts. Poll 1 s: 5 trials with a readiness probe and a 3 s listen
// delay (≈ 8 s each) check the stage against the poll's bound in every
// trial; 2 trials without a readiness probe (the refused requests are tens
// per trial at 100 req/s over 3 pods, so one trial already shows them; the
// second shows it was no accident). Poll 4 s: 8 trials (≈ 8 s each). The
// deletions are spread over one poll period (--trial-jitter), so each Ready
// transition falls at a uniform phase of Skipper's poll and its lag is
// uniform over [0, 4 s] plus the small terms of readyToUpstream. A lag above
// poll 1 s's bound (1 s + the observer's bracket ≤ 200 ms + 200 ms) is
// impossible at poll 1 s; at poll 4 s each trial has one chance in about
// 1.4/4 of staying under it, so all 8 do with probability 0.35⁸ ≈ 0.02%:
// the check that the stage follows the poll fails by chance about once in
// 5,000 runs. (The earlier check, medians of 5 trials a second apart, failed
// by chance far more often: the median of 5 uniform phases spreads widely.)
func TestStartupOnLocalCluster(t *testing.T) {
	began := time.Now()
	defer func() { t.Logf("startup e2e: %s", time.Since(began).Round(time.Second)) }()
	const fast, slow = time.Second, 4 * time.Second
	const delay = 3 * time.Second
	var fastLags, slowLags []time.Duration

	withCluster(t, fast, func(t *testing.T, c *localcluster.Cluster, client kubernetes.Interface) {
		t.Run("readiness probe with a listen delay", func(t *testing.T) {
			cfg := config(t, c, client, fast, 5)
			cfg.ProbeListenDelay = delay
			sink := run(t, cfg)
			for _, r := range sink.Records {
				if !r.Valid {
					continue // readyToUpstream reports it
				}
				// The kubelet's readiness probe cannot connect before the
				// listener opens, so Ready comes at least the delay after
				// the container started (both read on the probe's clock
				// through the skew estimate, ± its bound).
				if d := between(t, r, results.StageContainerStarted, results.StagePodReadyCondition); d < delay-time.Duration(r.SkewUncertaintyNS) {
					t.Errorf("trial %d: container_started → pod_ready_condition %s, want ≥ --listen-delay %s", r.Trial, d, delay)
				}
				if len(r.StartupFailures) > 0 {
					t.Errorf("trial %d: startup failures %v behind a readiness probe", r.Trial, r.StartupFailures)
				}
				if d := between(t, r, results.StageListenerOpen, results.StageFirstRequest); d < -time.Duration(r.SkewUncertaintyNS) {
					t.Errorf("trial %d: first_request %s before the listener opened", r.Trial, d)
				}
			}
			fastLags = readyToUpstream(t, sink.Records, fast)
		})

		t.Run("no readiness probe with a listen delay", func(t *testing.T) {
			cfg := config(t, c, client, fast, 2)
			cfg.ProbeListenDelay, cfg.NoReadiness = delay, true
			// Skipper retries a refused GET on another endpoint; a POST it
			// cannot, so each refused connection is a 502 the load sees.
			cfg.LoadMethod = http.MethodPost
			sink := run(t, cfg)
			for _, r := range sink.Records {
				n := r.StartupFailures["status_502"] + r.StartupFailures["refused"]
				if n == 0 {
					t.Errorf("trial %d: no refused/502 failures attributed to the startup (startup %v, trial %v)",
						r.Trial, r.StartupFailures, r.ClientFailures)
				}
				// Ready without a readiness probe: routed before it listens.
				if d := between(t, r, results.StageSliceReady, results.StageListenerOpen); d <= 0 {
					t.Errorf("trial %d: slice_ready → listener_open %s, want the address ready before the listener", r.Trial, d)
				}
			}
			file, err := results.Decode(bytes.NewReader(sink.Encoded.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := results.NewTextReporter(results.Summarize(file, results.Options{}))(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "readiness probe is missing") {
				t.Errorf("report does not say the readiness probe is missing:\n%s", out.String())
			}
		})
	})

	withCluster(t, slow, func(t *testing.T, c *localcluster.Cluster, client kubernetes.Interface) {
		slowLags = readyToUpstream(t, run(t, config(t, c, client, slow, 8)).Records, slow)
	})

	if len(fastLags) == 0 || len(slowLags) == 0 {
		t.Fatal("no lags to compare")
	}
	mf, ms := median(fastLags), median(slowLags)
	t.Logf("pod_ready_condition → upstream_present: poll %s %v (median %s), poll %s %v (median %s)", fast, fastLags, mf, slow, slowLags, ms)
	// readyToUpstream held every lag under its own poll's bound; here the
	// slow poll must show a lag the fast poll's bound rules out.
	fastBound := fast + 2*200*time.Millisecond
	if slices.Max(slowLags) <= fastBound {
		t.Errorf("no lag at poll %s above %s (poll %s's bound): %v; the stage does not follow Skipper's poll", slow, fastBound, fast, slowLags)
	}
}

// TestMain runs the tests in namespaces of their own, so that the clusters
// they start run beside other packages' (localcluster.Isolate).
func TestMain(m *testing.M) { localcluster.IsolatedMain(m) }
