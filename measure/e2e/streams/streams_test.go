package streams

import (
	"errors"
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
// and resets them. The clients' closes agree with the probe's exit
// (container_exit, pod clock corrected for skew): not more than the
// probe's stream reset + HTTP drain (cfgShutdown) before it, and within
// 50 ms after it (the reset travels loopback-fast; the skew bound is at
// most 50 ms: MaxSkewUncertainty).
func TestNoneOutlivesWithdrawal(t *testing.T) {
	cfg := config(t, load.ProtocolWebSocket, probe.StreamDrain{Mode: probe.DrainNone})
	cfg.InClusterLoad, cfg.InClusterRate = 1, 20
	r, s := trialStreams(t, cfg)
	checkNone(t, r, s, "ingress")
	if r.ClusterStreams == nil {
		t.Fatalf("no ClusterIP stream record; runners %+v", r.Runners)
	}
	t.Logf("cluster streams: %+v", *r.ClusterStreams)
	checkNone(t, r, r.ClusterStreams, "ClusterIP")
}

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
	exit, ok := r.Offset(results.StageContainerExit)
	sig, _ := r.Offset(results.StageSigterm)
	if !ok || s.LastCloseNS == nil {
		t.Fatalf("no container_exit or no close")
	}
	last := sig + time.Duration(*s.LastCloseNS)
	if d := last - exit; d > 50*time.Millisecond || d < -time.Duration(cfgShutdown) {
		t.Errorf("%s: last client close %s after T0, probe exit %s: want within 50 ms after the exit", path, last, exit)
	}
	if path == "ingress" && s.ProbeEnds[probe.EndProcessExit] < int64(s.OpenAtSigterm) {
		t.Errorf("probe ends %v, want ≥ %d process_exit", s.ProbeEnds, s.OpenAtSigterm)
	}
}

// cfgShutdown bounds how long before its exit stamp the probe resets its
// streams: the reset comes first, then the HTTP drain (keep-alive
// connections only, milliseconds), then Exit.
const cfgShutdown = time.Second

// --stream-drain close through Traefik, gRPC over h2c: every stream ends
// with status OK within 100 ms of SIGTERM (one channel send and one
// trailers frame through Traefik on loopback), no client sees an abrupt
// end, and with immediate reconnects the herd's busiest 100 ms holds at
// least 80% of the pod's streams.
func TestCloseGRPCThroughTraefik(t *testing.T) {
	_, s := trialStreams(t, config(t, load.ProtocolGRPC, probe.StreamDrain{Mode: probe.DrainClose}))
	if s.Abrupt != 0 || s.CloseKinds["grpc_status 0"] != s.OpenAtSigterm {
		t.Errorf("close kinds %v, want %d grpc_status 0", s.CloseKinds, s.OpenAtSigterm)
	}
	if s.LastCloseNS == nil || time.Duration(*s.LastCloseNS) > 100*time.Millisecond {
		t.Errorf("last close %v after SIGTERM, want ≤ 100ms", s.LastCloseNS)
	}
	if float64(s.HerdPeak) < 0.8*float64(s.OpenAtSigterm) {
		t.Errorf("herd peak %d per 100ms of %d streams, want ≥ 80%%", s.HerdPeak, s.OpenAtSigterm)
	}
}

// --stream-drain close-jittered=5s through Skipper: closes spread over
// [0, 5 s] after SIGTERM (the last ≤ 5.2 s: the probe's timer plus
// delivery), all graceful with 1012, and the herd's busiest 100 ms holds
// at most a quarter of the pod's streams (close's holds ≥ 80%: see above).
// 60 streams over 3 replicas put about 20 on the deleted pod (7 of 20 did
// in a first run, too few: two of 7 uniform draws land within 100 ms more
// often than not); with k ≥ 12 draws uniform over 5 s, more than k/4 in
// one sliding 100 ms window has probability below 1e-2 (Poisson rate
// k/50 per window, about 50 windows).
func TestCloseJitteredSpreadsTheHerd(t *testing.T) {
	cfg := config(t, load.ProtocolWebSocket, probe.StreamDrain{Mode: probe.DrainCloseJittered, Spread: 5 * time.Second})
	cfg.Streams.N = 3 * streams
	_, s := trialStreams(t, cfg)
	if s.Abrupt != 0 || s.CloseKinds["ws_close 1012"] != s.OpenAtSigterm {
		t.Errorf("close kinds %v, want %d ws_close 1012", s.CloseKinds, s.OpenAtSigterm)
	}
	if s.FirstCloseNS == nil || *s.FirstCloseNS < 0 || time.Duration(*s.LastCloseNS) > 5200*time.Millisecond {
		t.Errorf("closes from %v to %v after SIGTERM, want within [0, 5.2s]", s.FirstCloseNS, s.LastCloseNS)
	}
	if 4*s.HerdPeak > s.OpenAtSigterm {
		t.Errorf("herd peak %d per 100ms of %d streams, want ≤ a quarter", s.HerdPeak, s.OpenAtSigterm)
	}
}

// gRPC through Skipper, which speaks HTTP/1.1 to the pods: no stream
// opens, and the run stops before any trial with a FlagError (exit 2)
// naming Traefik's h2c annotation.
func TestGRPCWithoutH2C(t *testing.T) {
	cfg := e2etest.Config(t, cluster, cluster.Client)
	cfg.Streams = measure.StreamOptions{N: 2, Protocol: load.ProtocolGRPC, Reconnect: load.Reconnect{Policy: "fixed", Delay: 200 * time.Millisecond}}
	cfg.SettleTimeout = 20 * time.Second
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

// --stream-drain goaway through Traefik, gRPC: the probe's HTTP/2 GOAWAY
// at SIGTERM stops new streams on Traefik's connection to it, but the
// streams in flight go on (no close at SIGTERM: the first ends after the
// release, seconds later) and end with status OK when the probe exits: no
// client sees UNAVAILABLE, which only --stream-drain none gives.
func TestGoawayLetsStreamsFinish(t *testing.T) {
	cfg := config(t, load.ProtocolGRPC, probe.StreamDrain{Mode: probe.DrainGoaway})
	// GOAWAY comes with the listener closed (as grpc-go's GracefulStop),
	// so POST /release cannot reach the probe: its hold ends the trial.
	// 10 s keeps that short and still exceeds the 2 s quiet period.
	cfg.Hold = 10 * time.Second
	_, s := trialStreams(t, cfg)
	if s.Abrupt != 0 || s.CloseKinds["grpc_status 0"] != s.OpenAtSigterm {
		t.Errorf("close kinds %v, want %d grpc_status 0 and no UNAVAILABLE", s.CloseKinds, s.OpenAtSigterm)
	}
	// The probe exits at the end of its 10 s hold: well over a second
	// after SIGTERM.
	if s.FirstCloseNS == nil || time.Duration(*s.FirstCloseNS) < time.Second {
		t.Errorf("first close %v after SIGTERM, want the streams to outlive the GOAWAY", s.FirstCloseNS)
	}
}
