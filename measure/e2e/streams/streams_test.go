package streams

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/streams", localcluster.Options{Nodes: 2, Ingress: "all"}, func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// Sizes: every check is per stream, so one trial per test with 20 streams
// gives 20 samples of each property; a run of one trial takes about a
// minute here (setup, steady state, the trial, cleanup).
const streams = 20

// config is one trial through Skipper (websocket) or Traefik (grpc) with
// streams held and drained as drain says. Reconnects wait 50 ms, no jitter:
// the herd keeps the closes' shape (shifted by 50 ms and a loopback
// handshake, well inside one 100 ms bin), and a stream re-opened to the
// draining pod while the data plane still routes to it (up to Skipper's
// 3 s poll) is closed again at most 20 times a second, not in a busy loop.
func config(t *testing.T, protocol string, drain probe.StreamDrain) measure.Config {
	t.Helper()
	cfg := e2etest.Config(t, cluster, cluster.Client)
	cfg.Trials = 1
	cfg.Streams = measure.StreamOptions{N: streams, Protocol: protocol, Drain: drain,
		Reconnect: load.Reconnect{Policy: "fixed", Delay: 50 * time.Millisecond}}
	if protocol == load.ProtocolGRPC {
		u, err := url.Parse(cluster.TraefikURL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.URL, cfg.IngressClass = u, "traefik"
		cfg.Observer = upstream.KindTraefik
		cfg.ObserverOptions = upstream.Options{Interval: 100 * time.Millisecond, URLs: []string{cluster.TraefikAPIURL}}
	}
	return cfg
}

func trialStreams(t *testing.T, cfg measure.Config) (*results.Record, *results.StreamTrial) {
	t.Helper()
	sink := e2etest.Run(t, cfg, 10*time.Minute)
	r := sink.Records[0]
	if r.Streams == nil {
		t.Fatalf("trial without a stream record: %+v", r)
	}
	s := r.Streams
	t.Logf("streams: %+v", *s)
	if s.OpenAtSigterm == 0 {
		t.Fatalf("no stream open to %s at SIGTERM: %+v", r.Pod, *s)
	}
	return r, s
}

// --stream-drain none through Skipper and, from one in-cluster runner,
// through the ClusterIP (kube-proxy, nftables): the pod's WebSocket streams
// outlive the withdrawal of its endpoint (Skipper keeps an upgraded
// connection: its upgrade proxy copies bytes until one side closes,
// proxy/upgrade.go; kube-proxy's service chains match ct state new only, so
// an established flow keeps its NAT) and end abruptly when the probe exits
// and resets them; each client's close agrees with the probe's own record
// of that stream (checkNone).
func TestNoneOutlivesWithdrawal(t *testing.T) {
	bothPaths(t, config(t, load.ProtocolWebSocket, probe.StreamDrain{Mode: probe.DrainNone}), "ingress", checkNone)
}

// bothPaths runs cfg's trial with one in-cluster runner holding the same
// streams through the ClusterIP (20 req/s of its load: enough to see the
// ClusterIP path's withdrawal), and checks the streams of each path.
func bothPaths(t *testing.T, cfg measure.Config, ingress string, check func(*testing.T, *results.Record, *results.StreamTrial, string)) {
	t.Helper()
	cfg.InClusterLoad, cfg.InClusterRate = 1, 20
	r, s := trialStreams(t, cfg)
	check(t, r, s, ingress)
	check(t, r, clusterStreams(t, r), "ClusterIP")
}

// --stream-drain none through Traefik, gRPC over h2c: Traefik keeps a
// stream to a removed server (its servers are swapped for new requests
// only; an open HTTP/2 stream is proxied until it ends, traefik#9455), so
// the streams outlive the withdrawal Traefik's API shows and end when the
// probe exits and resets them: abruptly, by a reset Traefik passes on as
// RST_STREAM or as a broken transport, never with trailers.
//
// From a runner through the ClusterIP the reset reaches grpc-go itself,
// which ends each stream with status UNAVAILABLE: the one status of the
// four drains' that tells a client its server died (checkGoaway and
// TestCloseGRPCThroughTraefik see only OK).
func TestNoneGRPCThroughTraefik(t *testing.T) {
	bothPaths(t, config(t, load.ProtocolGRPC, probe.StreamDrain{Mode: probe.DrainNone}), "traefik", func(t *testing.T, r *results.Record, s *results.StreamTrial, path string) {
		checkNone(t, r, s, path)
		if path != "ClusterIP" {
			return
		}
		for kind, n := range s.CloseKinds {
			if !strings.HasSuffix(kind, " 14") {
				t.Errorf("%s: %d closes %q, want every stream ended with UNAVAILABLE (14)", path, n, kind)
			}
		}
	})
}

func clusterStreams(t *testing.T, r *results.Record) *results.StreamTrial {
	t.Helper()
	if r.ClusterStreams == nil {
		t.Fatalf("no ClusterIP stream record; runners %+v", r.Runners)
	}
	t.Logf("cluster streams: %+v; runners %+v", *r.ClusterStreams, r.Runners)
	return r.ClusterStreams
}

// closeAgreement is how far a client's close of a stream may be from the
// probe's own record of its end, per stream. The probe stamps the end
// before it resets the connection; from there the time goes to: the
// reset's way through the hop (Skipper's upgrade copy and Traefik's
// reverse proxy each end the client side from the goroutine that read the
// backend's error: one wake-up; kube-proxy's DNAT passes the RST in the
// kernel), the client's reader waking up on two busy cores (milliseconds),
// and the two clocks: the pod's stamp moves onto the tool's by the probe's
// skew estimate (and a runner's by its own), each wrong by at most its
// uncertainty, a /clock round trip through the pod proxy on this machine
// (a few ms; the run fails a trial above --max-skew-uncertainty). 50 ms is
// the bound and leaves an order of magnitude over these.
const closeAgreement = 50 * time.Millisecond

// closeLate is the most one stream in twenty may exceed closeAgreement by.
// In a CI run through Skipper, 27 of 28 closes were within 2.7 ms and one
// came 207 ms after the probe's stamp: one TCP segment held on its way,
// which no stamp at the door can see before it arrives. 200 ms is Linux's
// floor for both ways a segment waits (include/net/tcp.h: TCP_RTO_MIN, the
// retransmission of a lost one, and TCP_DELACK_MAX, a delayed ACK), so
// one such wait passes closeAgreement by at most TCP_RTO_MIN; a stamp that
// was wrong (the wrong stream, the wrong clock, a skew not applied) is off
// for every stream, not one in twenty.
const closeLate = 200 * time.Millisecond

// checkNone: every stream of the pod open at SIGTERM was still open after
// the data plane withdrew its endpoint, ended abruptly at the probe's exit,
// and the probe's record of each (matched by the client's stream id) ends
// within closeAgreement of the client's close.
func checkNone(t *testing.T, r *results.Record, s *results.StreamTrial, path string) {
	t.Helper()
	if s.OpenAtSigterm == 0 {
		t.Fatalf("%s: no stream open at SIGTERM", path)
	}
	if s.Graceful != 0 || s.Abrupt != s.OpenAtSigterm || s.Unclosed != 0 {
		t.Errorf("%s: closes %+v, want every stream ended abruptly", path, s.CloseKinds)
	}
	if s.OpenAtWithdrawal == nil || *s.OpenAtWithdrawal != s.OpenAtSigterm || s.OutliveNS == nil || *s.OutliveNS <= 0 {
		t.Errorf("%s: open at withdrawal %v, outlive %v: want every stream still open after the withdrawal", path, s.OpenAtWithdrawal, s.OutliveNS)
	}
	// The closes come at the probe's exit, not before: the streams of
	// --stream-drain none end only when the process does.
	exit, ok := r.Offset(results.StageContainerExit)
	sig, _ := r.Offset(results.StageSigterm)
	if !ok || s.FirstCloseNS == nil {
		t.Fatalf("%s: no container_exit or no close", path)
	}
	if first := sig + time.Duration(*s.FirstCloseNS); first < exit-cfgShutdown {
		t.Errorf("%s: first client close %s after T0, probe exit %s: want at the exit", path, first, exit)
	}
	if s.ProbeEnds[probe.EndProcessExit] < int64(s.OpenAtSigterm) {
		t.Errorf("%s: probe ends %v, want ≥ %d process_exit", path, s.ProbeEnds, s.OpenAtSigterm)
	}
	checkAgreement(t, r, s, path)
	checkHerdRecorded(t, r, s, path)
}

// checkHerdRecorded: streams that end with the pod's exit (none, goaway)
// re-open once the trial's other stages are complete; the record still
// holds their herd, because measure waits for the re-opens
// (awaitReopens), and every re-open landed on a surviving pod. A re-open
// whose first attempt failed waits for its policy's backoff (grpc-default:
// 1 s, then 1.6 s) and may miss measure's 3 s settle, so one in ten may be
// missing, and at least one (a trial holds 6 or 7 streams a path: one in
// ten of those is none, and make test saw 5 of 6 re-opened within 69 ms
// with the sixth past the settle); a herd that was not observed at all
// misses every one.
func checkHerdRecorded(t *testing.T, r *results.Record, s *results.StreamTrial, path string) {
	t.Helper()
	reopened := 0
	for pod, n := range s.Reopened {
		if pod == r.Pod {
			t.Errorf("%s: %d streams re-opened on the deleted pod %s", path, n, pod)
		}
		reopened += n
	}
	t.Logf("%s: %d of %d closed streams re-opened in the record (%v), herd peak %d per 100 ms", path, reopened, s.Closed, s.Reopened, s.HerdPeak)
	if s.HerdPeak == 0 || reopened < s.Closed-max(1, s.Closed/10) {
		t.Errorf("%s: %d of %d closed streams re-opened within the record, herd peak %d: want the herd recorded", path, reopened, s.Closed, s.HerdPeak)
	}
}

// checkAgreement: every closed stream is matched to the probe's record of
// it, and each close is within closeAgreement of the probe's end.
func checkAgreement(t *testing.T, r *results.Record, s *results.StreamTrial, path string) {
	t.Helper()
	t.Logf("%s: %d of %d closes matched to the probe's ends, client − probe %v ns (probe skew %s ± %s)", path,
		s.ProbeMatched, s.Closed, s.CloseLagNS, time.Duration(r.SkewNS), time.Duration(r.SkewUncertaintyNS))
	if s.ProbeMatched != s.Closed || len(s.CloseLagNS) != s.Closed {
		t.Errorf("%s: %d of %d closes matched to the probe's record of the stream", path, s.ProbeMatched, s.Closed)
	}
	late := 0
	for _, lag := range s.CloseLagNS {
		d := time.Duration(lag)
		if d <= closeAgreement && d >= -closeAgreement {
			continue
		}
		late++
		if d > closeAgreement+closeLate || d < -closeAgreement {
			t.Errorf("%s: a client saw its stream end %s after the probe ended it, want within ±%s", path, d, closeAgreement)
		}
	}
	if allowed := len(s.CloseLagNS) / 20; late > allowed {
		t.Errorf("%s: %d of %d closes more than %s from the probe's end, want at most %d (one in twenty, see closeLate)", path, late, len(s.CloseLagNS), closeAgreement, allowed)
	}
}

// cfgShutdown bounds how long before its exit stamp the probe resets its
// streams: the reset comes first, then the HTTP drain (keep-alive
// connections only, milliseconds), then Exit.
const cfgShutdown = time.Second

// --stream-drain close through Traefik, gRPC over h2c, and from one runner
// through the ClusterIP: every stream ends with status OK within 100 ms of
// SIGTERM (one channel send and one trailers frame, through Traefik on
// loopback or straight to the pod), no client sees an abrupt end, and the
// herd's busiest 100 ms holds at least 80% of the pod's streams.
func TestCloseGRPCThroughTraefik(t *testing.T) {
	bothPaths(t, config(t, load.ProtocolGRPC, probe.StreamDrain{Mode: probe.DrainClose}), "traefik", checkClose)
}

func checkClose(t *testing.T, r *results.Record, s *results.StreamTrial, path string) {
	t.Helper()
	if s.Abrupt != 0 || s.CloseKinds["grpc_status 0"] != s.OpenAtSigterm {
		t.Errorf("%s: close kinds %v, want %d grpc_status 0", path, s.CloseKinds, s.OpenAtSigterm)
	}
	if s.LastCloseNS == nil || time.Duration(*s.LastCloseNS) > 100*time.Millisecond {
		t.Errorf("%s: last close %v after SIGTERM, want ≤ 100ms", path, s.LastCloseNS)
	}
	if float64(s.HerdPeak) < 0.8*float64(s.OpenAtSigterm) {
		t.Errorf("%s: herd peak %d per 100ms of %d streams, want ≥ 80%%", path, s.HerdPeak, s.OpenAtSigterm)
	}
	checkAgreement(t, r, s, path)
}

// --stream-drain close-jittered=5s through Skipper and through the
// ClusterIP: closes spread over [0, 5 s] after SIGTERM (the last ≤ 5.2 s:
// the probe's timer plus delivery), all graceful with 1012, and the herd's
// busiest 100 ms holds at most a quarter of the pod's streams (close's
// holds ≥ 80%: see above). The quarter bound needs k ≥ 12 streams on the
// pod per path (7 of 20 were too few in a first run: two of 7 uniform
// draws land within 100 ms more often than not); with k ≥ 12 draws uniform
// over 5 s, more than k/4 in one sliding 100 ms window has probability
// below 1e-2 (Poisson rate k/50 per window, about 50 windows). 80 streams
// over 3 replicas put Binomial(80, 1/3) on the deleted pod, mean 27: fewer
// than 12 has probability 6e-5 per path.
func TestCloseJitteredSpreadsTheHerd(t *testing.T) {
	cfg := config(t, load.ProtocolWebSocket, probe.StreamDrain{Mode: probe.DrainCloseJittered, Spread: 5 * time.Second})
	cfg.Streams.N = 4 * streams
	bothPaths(t, cfg, "ingress", checkJittered)
}

func checkJittered(t *testing.T, r *results.Record, s *results.StreamTrial, path string) {
	t.Helper()
	if s.Abrupt != 0 || s.CloseKinds["ws_close 1012"] != s.OpenAtSigterm {
		t.Errorf("%s: close kinds %v, want %d ws_close 1012", path, s.CloseKinds, s.OpenAtSigterm)
	}
	if s.FirstCloseNS == nil || *s.FirstCloseNS < 0 || time.Duration(*s.LastCloseNS) > 5200*time.Millisecond {
		t.Errorf("%s: closes from %v to %v after SIGTERM, want within [0, 5.2s]", path, s.FirstCloseNS, s.LastCloseNS)
	}
	if s.OpenAtSigterm < 12 {
		t.Errorf("%s: %d streams on the pod, the quarter bound needs ≥ 12 (see above)", path, s.OpenAtSigterm)
	}
	if 4*s.HerdPeak > s.OpenAtSigterm {
		t.Errorf("%s: herd peak %d per 100ms of %d streams, want ≤ a quarter", path, s.HerdPeak, s.OpenAtSigterm)
	}
	checkAgreement(t, r, s, path)
}

// gRPC through Skipper, which speaks HTTP/1.1 to the pods: no stream
// opens, and the run stops before any trial with a FlagError (exit 2)
// naming Traefik's h2c annotation.
func TestGRPCWithoutH2C(t *testing.T) {
	cfg := e2etest.Config(t, cluster, cluster.Client)
	cfg.Streams = measure.StreamOptions{N: 2, Protocol: load.ProtocolGRPC, Reconnect: load.Reconnect{Policy: "fixed", Delay: 200 * time.Millisecond}}
	// The run waits this long twice: for the steady state (3 pods Ready and
	// routed: about 4 s here) and then for the streams, which fail every
	// 200 ms and never open. 10 s is over twice the first; the second only
	// collects failures.
	cfg.SettleTimeout = 10 * time.Second
	sink := e2etest.NewSink()
	err := measure.Run(t.Context(), cfg, sink, func(measure.Progress) {})
	var fe *measure.FlagError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), deploy.AnnotationTraefikScheme) {
		t.Fatalf("measure.Run = %v, want a FlagError naming %s", err, deploy.AnnotationTraefikScheme)
	}
	if len(sink.Records) != 0 {
		t.Errorf("%d trials ran", len(sink.Records))
	}
}

// --stream-drain goaway through Traefik, gRPC, and from one runner through
// the ClusterIP: the probe's HTTP/2 GOAWAY at SIGTERM stops new streams on
// each connection to it, but the streams in flight go on (no close at
// SIGTERM: the first ends after the release, seconds later) and end with
// status OK when the probe exits: no client sees UNAVAILABLE, which only
// --stream-drain none gives.
func TestGoawayLetsStreamsFinish(t *testing.T) {
	cfg := config(t, load.ProtocolGRPC, probe.StreamDrain{Mode: probe.DrainGoaway})
	// GOAWAY comes with the listener closed (as grpc-go's GracefulStop),
	// so POST /release cannot reach the probe: its hold ends the trial.
	// 5 s keeps that short and still exceeds the 1 s quiet period.
	cfg.Hold = 5 * time.Second
	bothPaths(t, cfg, "traefik", checkGoaway)
}

func checkGoaway(t *testing.T, r *results.Record, s *results.StreamTrial, path string) {
	t.Helper()
	if s.Abrupt != 0 || s.CloseKinds["grpc_status 0"] != s.OpenAtSigterm {
		t.Errorf("%s: close kinds %v, want %d grpc_status 0 and no UNAVAILABLE", path, s.CloseKinds, s.OpenAtSigterm)
	}
	// The probe exits at the end of its 10 s hold: well over a second
	// after SIGTERM.
	if s.FirstCloseNS == nil || time.Duration(*s.FirstCloseNS) < time.Second {
		t.Errorf("%s: first close %v after SIGTERM, want the streams to outlive the GOAWAY", path, s.FirstCloseNS)
	}
	checkAgreement(t, r, s, path)
	checkHerdRecorded(t, r, s, path)
}

// Failed re-opens on the real cluster, and the advice the report builds
// from them. The probe exits at SIGTERM (the fast-exiting app) and its
// streams die with it (none); Skipper routes to the dead pod until its next
// poll of the API server (3 s here), so re-opens that it sends there fail
// (Skipper answered 503 in one run; in others the handshake timed out
// while Skipper waited on the dead address) and retry, while
// those it sends to the other pod open. The report must then advise from
// the survivors' clean peak (results.SpreadFor), never the no-failure
// advice.
//
// How large the clean peak comes out is the cluster's timing, not the
// tool's: a re-open that timed out on the dead address overlaps every
// 100 ms it was in flight (issue 28 item 12), and on a loaded 2-core
// machine the survivors' re-opens all fell under such timeouts but one
// (clean peak 1, where no spread up to 10 minutes keeps 20 closes at one
// per 100 ms). So the test holds the report to the branch the record
// implies: a spread J when SpreadFor finds one, the no-spread advice when
// it does not, and the capacity-unknown advice at a clean peak of 0; the
// J branch's wording is results.TestStreamSummaryUnclosedIsLowerBound's.
//
// Size: Skipper sends each first re-open to one of 3 pods, so with k
// streams on the deleted pod none fails with probability about (2/3)^k.
// At the 20 streams of the other tests k is about 7 and that is 6%; 60
// streams make k about 20 and it 0.03%, at no cost in time (one trial
// either way).
func TestFailedReopensSizeTheSpread(t *testing.T) {
	cfg := config(t, load.ProtocolWebSocket, probe.StreamDrain{Mode: probe.DrainNone})
	cfg.ExitOnSigterm = true
	cfg.Streams.N = 3 * streams
	r, s := trialStreams(t, cfg)
	failed := 0
	for _, n := range s.Failures {
		failed += n
	}
	t.Logf("failed re-opens %v, clean peak %d, herd %v", s.Failures, s.HerdCleanPeak, s.Herd)
	if failed == 0 {
		t.Fatalf("failed re-opens %v: want re-opens that failed on the dead pod", s.Failures)
	}
	checkHerdRecorded(t, r, s, "ingress")
	sum := results.NewStreamSummary(0.95, 0.95)
	sum.Add(r)
	sum.Close()
	var report strings.Builder
	if err := results.NewStreamsReporter(sum, 0, 0)(&report); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", report.String())
	var want string
	switch j, ok := results.SpreadFor(sum.MaxOpen, sum.CleanPeak, results.HerdBin, results.SpreadConfidence); {
	case sum.CleanPeak == 0:
		want = "the survivors' capacity"
	case ok && j > 0:
		want = "Spread the closes over J ≥ " + j.String()
	case !ok:
		want = fmt.Sprintf("the survivors took only %d re-opens", sum.CleanPeak)
	default:
		t.Fatalf("SpreadFor(%d streams, clean peak %d) = 0: no spread needed, yet %d re-opens failed", sum.MaxOpen, sum.CleanPeak, failed)
	}
	if !strings.Contains(report.String(), want) || strings.Contains(report.String(), "needs no spread") {
		t.Errorf("the report does not say %q, or gives the no-failure advice", want)
	}
}
