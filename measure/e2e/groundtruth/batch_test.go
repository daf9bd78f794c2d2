package groundtruth

import (
	"context"
	"fmt"
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
// a slice update by its length: a pod event queues the Service with
// AddAfter(batchPeriod) (k8s.io/kubernetes pkg/controller/endpointslice/
// endpointslice_controller.go, syncPod). That is a floor only when no sync
// of the Service is already waiting: a later AddAfter does not push a
// waiting entry back (client-go util/workqueue/delaying_queue.go keeps the
// earlier readyAt), so a deletion shortly after another pod event (the
// previous trial's replacement turning Ready, its pod object going away)
// rides on that sync and arrives early. The test therefore deletes only
// once the namespace's pods and slices have been unchanged for a batch
// period (plus 200 ms for the list's and the informers' delivery), through
// measure.Config.BeforeDelete, as deploy/local/e2e/batchperiod does. Then
// T0 → slice_not_ready is the period plus the control plane's own latency:
// the DELETE's write, the controller's watch, the slice write and our
// watch's delivery, all in one process on loopback — tens of ms at most on
// an idle 2-core machine. Every trial must be at or above the period (less
// 5 ms: the last list is read a few ms before T0, and a change in that gap
// would go unseen), and the median within 50 ms above it. An occasional
// +1 s from the controller's stale-cache retry is real behaviour the
// median is robust to.
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
					return untilQuiet(ctx, client, ns, period+200*time.Millisecond)
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
				got = append(got, d)
			}
			slices.Sort(got)
			med := got[len(got)/2]
			t.Logf("--batch-period %s: T0 → slice_not_ready %v (median %s)", period, got, med)
			if got[0] < period-5*time.Millisecond {
				t.Errorf("T0 → slice_not_ready %s with no sync pending at the deletion, want ≥ %s", got[0], period)
			}
			if med > period+50*time.Millisecond {
				t.Errorf("median T0 → slice_not_ready %s, want %s (+0..50ms)", med, period)
			}
		})
	}
}

// untilQuiet returns once the pods and EndpointSlices in ns have kept the
// same resource versions for quiet: no pod or slice event reached the
// EndpointSlice controller in that time, so no sync of the Service is
// waiting in its queue.
func untilQuiet(ctx context.Context, client kubernetes.Interface, ns string, quiet time.Duration) error {
	var seen string
	var since time.Time
	for {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list pods in %s: %w", ns, err)
		}
		sl, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list endpointslices in %s: %w", ns, err)
		}
		var versions []string
		for _, p := range pods.Items {
			versions = append(versions, p.Name+"@"+p.ResourceVersion)
		}
		for _, e := range sl.Items {
			versions = append(versions, e.Name+"@"+e.ResourceVersion)
		}
		if v := strings.Join(versions, ","); v != seen {
			seen, since = v, time.Now()
		}
		if time.Since(since) >= quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
