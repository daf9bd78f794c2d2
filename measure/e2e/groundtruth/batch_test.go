package groundtruth

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

type sink struct{ trials []*results.Record }

func (s *sink) Header(*results.Header) error { return nil }
func (s *sink) Trial(r *results.Record) error {
	s.trials = append(s.trials, r)
	return nil
}

// The EndpointSlice controller's --endpointslice-updates-batch-period delays
// every slice update by exactly its length (the pod's update is queued with
// AddAfter(batchPeriod): pkg/controller/endpointslice/endpointslice_controller.go
// onPodUpdate → queue.AddAfter). So T0 → slice_not_ready must be the period
// plus the control plane's own latency: the DELETE's write, the controller's
// watch, the slice write and our watch's delivery, all in one process on
// loopback — tens of ms at most on an idle 2-core machine. The median over
// the trials must land within 50 ms above the period.
//
// The period is a floor only when no sync of the Service is already
// pending: a later AddAfter does not push back an entry already waiting
// (client-go util/workqueue/delaying_queue.go keeps the earlier readyAt), so
// a pod change less than a period before the deletion carries the deletion
// with it, sooner. measure deletes only in steady state, after the slice
// writes its own pods caused (the replacement's slice_ready, the deleted
// pod's slice_removed), so its pods leave nothing pending; a trial that
// still meets a pending sync (or the controller's +1 s stale-cache retry,
// real behaviour too) moves one value, and the median of 5 is robust to two
// such trials. A median below period − 5 ms would mean the stage is stamped
// wrong.
func TestBatchPeriodGroundTruth(t *testing.T) {
	for _, period := range []time.Duration{0, 500 * time.Millisecond, 2 * time.Second} {
		t.Run(period.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			c, err := localcluster.Start(ctx, localcluster.Options{BatchPeriod: period, IngressPoll: time.Second})
			if err != nil {
				t.Fatalf("start local cluster with --batch-period %s: %v", period, err)
			}
			defer func() {
				if err := c.Stop(); err != nil {
					t.Errorf("stop local cluster: %v", err)
				}
			}()
			client, err := kubernetes.NewForConfig(c.Config)
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(c.IngressURL)
			cfg := measure.Config{
				Client: client, RESTConfig: c.Config, Trials: 5, Replicas: 3, Mode: measure.ModeDelete,
				IngressClass: "skipper", Host: "epwindow.local", URL: u, Observer: upstream.KindSkipper,
				ObserverOptions: upstream.Options{Interval: 200 * time.Millisecond, URLs: []string{c.RoutesURL}},
				Rate:            50, Hold: 60 * time.Second, QuietPeriod: time.Second, GraceMargin: 10 * time.Second,
				SettleTimeout: 2 * time.Minute, MaxSkewUncertainty: 50 * time.Millisecond, Image: deploy.DefaultImage,
				PreStop: true, Clock: clock.RealClock{},
			}
			var s sink
			if err := measure.Run(ctx, cfg, &s, nil); err != nil {
				t.Fatalf("measure.Run: %v", err)
			}
			var got []time.Duration
			for _, r := range s.trials {
				d, ok := r.Offset(results.StageSliceNotReady)
				if !ok {
					t.Fatalf("trial %d: no slice_not_ready (%s)", r.Trial, r.InvalidReason())
				}
				got = append(got, d)
			}
			slices.Sort(got)
			med := got[len(got)/2]
			t.Logf("--batch-period %s: T0 → slice_not_ready %v (median %s)", period, got, med)
			if med < period-5*time.Millisecond || med > period+50*time.Millisecond {
				t.Errorf("median T0 → slice_not_ready %s, want %s (+0..50ms)", med, period)
			}
		})
	}
}
