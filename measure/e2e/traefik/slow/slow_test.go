package slow

import (
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure/e2e/traefik"
)

var cluster *localcluster.Cluster

// throttle is this package's providersThrottleDuration.
const throttle = 3 * time.Second

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/traefik/slow", traefik.Options(throttle), func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// Ground truth at 3 s: the delays stay within [0, 3 s] plus a poll and the
// slack (traefik.CheckGroundTruth cites Traefik's source) and spread over
// it, so the largest of 8 exceeds 1 s — beyond anything the 500 ms cluster
// of package traefik allows (traefik.Bound(500ms) = 900 ms) — except with
// probability about (1/3)^8 ≈ 1.5·10^-4.
func TestGroundTruth3s(t *testing.T) {
	if traefik.Bound(500*time.Millisecond) >= time.Second {
		t.Fatalf("the 500 ms bound %s reaches this test's 1 s", traefik.Bound(500*time.Millisecond))
	}
	stop := traefik.Churn(t, cluster.Client)
	defer stop()
	delays := traefik.CheckGroundTruth(t, traefik.Run(t, traefik.GroundTruthConfig(t, cluster, 8, throttle)).Records, throttle, time.Second)
	t.Logf("upstream_removed − slice_not_ready at providersThrottleDuration %s: %v", throttle, delays)
}
