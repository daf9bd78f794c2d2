package traefik

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/results"
)

// cluster is the package's local cluster: Traefik alone, throttled at
// throttle.
var cluster *localcluster.Cluster

// throttle is this package's providersThrottleDuration (package slow: 3 s).
const throttle = 500 * time.Millisecond

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/traefik", Options(throttle), func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// Trial counts: the provider tests check properties every trial must have
// (valid, stages present, one order between two stages seconds apart), so
// 3 trials each suffice; the ground truth needs the delays spread over the
// throttle (see CheckGroundTruth) and runs 8.

// Traefik's Kubernetes Ingress provider keeps a terminating pod's endpoint
// as a server marked fenced until the endpoint leaves the slice; the
// observer counts it withdrawn as soon as it is fenced, within one throttle
// and one poll of slice_not_ready and long before slice_removed (the
// probe's preStop keeps the pod, and its endpoint, for seconds). Counting
// fenced servers as present would put upstream_removed after
// slice_removed. The header names Traefik's version as its API gives it.
// Checked on TestGroundTruth500ms's run (the same provider and class).
func checkFenced(t *testing.T, sink *e2etest.Sink) {
	t.Helper()
	for _, r := range sink.Records {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			continue
		}
		nr, _ := r.Offset(results.StageSliceNotReady)
		rm, ok := r.Offset(results.StageUpstreamRemoved)
		gone, ok2 := r.Offset(results.StageSliceRemoved)
		if !ok || !ok2 {
			t.Errorf("trial %d: upstream_removed %v slice_removed %v", r.Trial, ok, ok2)
			continue
		}
		if rm-nr > Bound(throttle) || rm >= gone {
			t.Errorf("trial %d: slice_not_ready %s, upstream_removed %s, slice_removed %s: the fenced server was not counted withdrawn",
				r.Trial, nr, rm, gone)
		}
	}
	if want := apiVersion(t); sink.Meta == nil || sink.Meta.Ingress.Version != want {
		t.Errorf("header %+v, want ingress version %q (Traefik's /api/version)", sink.Meta, want)
	}
}

// Traefik's ingress-nginx provider (v3.6.12) reads the Terminating
// condition but builds its servers from the address alone (buildService in
// pkg/provider/kubernetes/ingress-nginx/kubernetes.go), so nothing is
// fenced: a terminating pod's server stays while the endpoint is serving,
// and goes with slice_not_serving (the probe fails its readiness once its
// preStop is called). So upstream_removed follows slice_not_serving, within
// one throttle and one poll, and never before it — unlike the Ingress
// provider, which withdraws it at slice_not_ready.
func TestIngressNGINXProvider(t *testing.T) {
	sink := Run(t, Config(t, cluster, "nginx", 3))
	for _, r := range sink.Records {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			continue
		}
		ns, ok1 := r.Offset(results.StageSliceNotServing)
		last, ok2 := r.Offset(results.StageUpstreamLastSeen)
		rm, ok3 := r.Offset(results.StageUpstreamRemoved)
		if !ok1 || !ok2 || !ok3 {
			t.Errorf("trial %d: slice_not_serving %v upstream_last_present %v upstream_removed %v", r.Trial, ok1, ok2, ok3)
			continue
		}
		// The last poll that listed the server may precede the change by
		// up to one Interval; the first that did not follows it.
		if rm < ns-slack || last < ns-Interval-slack || rm-ns > Bound(throttle) {
			t.Errorf("trial %d: slice_not_serving %s, upstream_last_present %s, upstream_removed %s: want the server kept until not serving, then dropped within %s",
				r.Trial, ns, last, rm, Bound(throttle))
		}
		t.Logf("trial %d: slice_not_ready → slice_not_serving %s, upstream_removed − slice_not_serving %s", r.Trial,
			func() time.Duration { nr, _ := r.Offset(results.StageSliceNotReady); return ns - nr }(), rm-ns)
	}
}

// Ground truth at 500 ms: the delays stay within the throttle's bound
// (CheckGroundTruth), and the Ingress provider's fenced servers count as
// withdrawn (checkFenced). That they follow the throttle is shown at 3 s
// (package slow), where they reach beyond this bound.
func TestGroundTruth500ms(t *testing.T) {
	stop := Churn(t, cluster.Client)
	defer stop()
	sink := Run(t, GroundTruthConfig(t, cluster, 8, throttle))
	delays := CheckGroundTruth(t, sink.Records, throttle, 0)
	t.Logf("upstream_removed − slice_not_ready at providersThrottleDuration %s: %v", throttle, delays)
	checkFenced(t, sink)
}

// apiVersion is the version Traefik's API reports.
func apiVersion(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(cluster.TraefikAPIURL + "/api/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Version string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.Version == "" {
		t.Fatalf("decode /api/version: %v %+v", err, v)
	}
	return v.Version
}
