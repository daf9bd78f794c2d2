package slow

import (
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure/e2e/clusterip"
)

var cluster *localcluster.Cluster

// period is this package's kube-proxy --min-sync-period.
const period = 4 * time.Second

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/clusterip/slow", clusterip.Options(period), func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// Ground truth at 4 s: the delays stay within [0, 4 s] (bound and its
// justification: clusterip.CheckGroundTruth) and spread over it, so the
// largest of 10 exceeds 1.25 s — beyond anything the 1 s cluster of package
// clusterip allows (1 s + its slack) — except with probability
// (1.25/4)^10 ≈ 10^-5.
func TestGroundTruth4s(t *testing.T) {
	stop := clusterip.Churn(t, cluster.Client)
	defer stop()
	cfg := clusterip.Config(t, cluster, 10, period)
	// A deletion may wait a whole period before kube-proxy drops it, and
	// the probe must outlive that and the quiet period.
	cfg.QuietPeriod = 2 * time.Second
	delays := clusterip.CheckGroundTruth(t, clusterip.Run(t, cfg), period, time.Second+250*time.Millisecond)
	t.Logf("cluster_last_routed − slice_not_ready at --min-sync-period %s: %v", period, delays)
}
