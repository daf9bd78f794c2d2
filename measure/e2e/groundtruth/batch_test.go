package groundtruth

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// with it, sooner. A slice change queues a sync too, after
// max(sliceChangeSyncDelay, period), when the controller's tracker does not
// take the slice for its own latest write (queueServiceForEndpointSlice in
// the same file; seen here: a deletion 850 ms after a slice write, with a
// 500 ms period, was carried at 154 ms). So, as the deploy/local
// batch-period test does, each deletion waits (measure's BeforeDelete)
// until the run's pods and slices have been unchanged for the longer of the
// two plus this poll's and the informers' delivery: then nothing is
// pending, and every trial — not only the median — must reach the period
// (less 5 ms for the stamps' own delivery). A sync that fails on a stale
// cache is retried after 1 s (defaultSyncBackOff), real behaviour too, and
// can move a trial up, so the upper bound holds for the median of 5.
// sliceChangeSyncDelay is endpointSliceChangeMinSyncDelay of
// pkg/controller/endpointslice/endpointslice_controller.go.
const sliceChangeSyncDelay = time.Second

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
				BeforeDelete: func(ctx context.Context, ns string) error {
					// Its own client: polling on the run's would spend the
					// run's client-side rate limit.
					return waitUnchanged(ctx, c.Client, ns, max(period, sliceChangeSyncDelay)+200*time.Millisecond)
				},
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
				if d < period-5*time.Millisecond {
					t.Errorf("trial %d: T0 → slice_not_ready %s, below the period %s with no sync pending", r.Trial, d, period)
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

// waitUnchanged returns once the pods and EndpointSlices of namespace ns
// have kept the same resource versions for quiet, polling every 100 ms.
func waitUnchanged(ctx context.Context, c kubernetes.Interface, ns string, quiet time.Duration) error {
	var last string
	since := time.Now()
	for {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		sl, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var versions []string
		for _, p := range pods.Items {
			versions = append(versions, p.Name+"@"+p.ResourceVersion)
		}
		for _, e := range sl.Items {
			versions = append(versions, e.Name+"@"+e.ResourceVersion)
		}
		slices.Sort(versions)
		if v := strings.Join(versions, " "); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) >= quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestMain runs the tests in namespaces of their own, so that the clusters
// they start run beside other packages' (localcluster.Isolate).
func TestMain(m *testing.M) { localcluster.IsolatedMain(m) }
