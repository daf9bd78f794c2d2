// Package e2etest is the scaffolding shared by the test packages that
// measure on the local cluster (started once per package by
// localcluster.Main): the epwindow binary, a quick valid measure.Config and
// a sink that keeps a run's records.
package e2etest

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// IngressClass is the class Skipper serves on the local cluster
// (deploy/local/skipper: -kubernetes-ingress-class=^skipper$).
const IngressClass = "skipper"

// Bin is bin/epwindow as make build leaves it, beside bin/epwindow-local
// (whose node agent runs the probe pods from the same directory).
func Bin(t testing.TB) string {
	t.Helper()
	if err := localcluster.RequireBinaries("epwindow"); err != nil {
		t.Fatal(err)
	}
	dir, err := localcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "epwindow")
}

// Config is a quick, valid measure run on c through Skipper, as client:
// 3 trials of 3 replicas, 100 req/s, the observer reading Skipper's route
// table every 200 ms.
//
// The quiet period is 1 s (measure's default is 3 s): it only holds the
// probe after every observer saw the address leave and the last request
// reached it (measure/trial.go releaseState), so it bounds nothing the
// tests check; at 100 req/s over 3 replicas a pod still routed to goes
// 1 s without a request with probability about (2/3)^100. It is on every
// trial's path: a second less a trial.
func Config(t testing.TB, c *localcluster.Cluster, client kubernetes.Interface) measure.Config {
	t.Helper()
	u, err := url.Parse(c.IngressURL)
	if err != nil {
		t.Fatal(err)
	}
	return measure.Config{
		Client: client, RESTConfig: c.Config, Trials: 3, Replicas: 3, Mode: measure.ModeDelete,
		IngressClass: IngressClass, Host: "epwindow.local", URL: u, Observer: upstream.KindSkipper,
		ObserverOptions: upstream.Options{Interval: 200 * time.Millisecond, URLs: []string{c.RoutesURL}},
		Rate:            100, Hold: 60 * time.Second, QuietPeriod: time.Second, GraceMargin: 10 * time.Second,
		SettleTimeout: 2 * time.Minute, MaxSkewUncertainty: 50 * time.Millisecond, Image: deploy.DefaultImage,
		PreStop: true, Clock: clock.RealClock{},
	}
}

// Sink keeps a run's results, and writes them through the real encoder to
// Encoded.
type Sink struct {
	Meta    *results.Header
	Records []*results.Record
	Encoded bytes.Buffer
	w       *results.Writer
}

// NewSink returns an empty Sink.
func NewSink() *Sink {
	s := &Sink{}
	s.w = results.NewWriter(&s.Encoded)
	return s
}

// Header implements measure.Sink.
func (s *Sink) Header(h *results.Header) error { s.Meta = h; return s.w.WriteHeader(h) }

// Trial implements measure.Sink.
func (s *Sink) Trial(r *results.Record) error {
	s.Records = append(s.Records, r)
	return s.w.WriteTrial(r)
}

// RunLeftovers lists what any measure run left in namespace ns: every
// object carrying a run id (deploy.LabelRunID) — Deployments, Services,
// Ingresses and pods, terminating ones included — and ReplicaSets orphaned
// rather than collected with their Deployment. HTTPRoutes need the dynamic
// client: RouteLeftovers.
func RunLeftovers(t testing.TB, c kubernetes.Interface, ns string) []string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: deploy.LabelRunID}
	var left []string
	for _, l := range []struct {
		kind string
		list func() (runtime.Object, error)
	}{
		{"deployment", func() (runtime.Object, error) { return c.AppsV1().Deployments(ns).List(ctx, sel) }},
		{"service", func() (runtime.Object, error) { return c.CoreV1().Services(ns).List(ctx, sel) }},
		{"ingress", func() (runtime.Object, error) { return c.NetworkingV1().Ingresses(ns).List(ctx, sel) }},
		{"pod", func() (runtime.Object, error) { return c.CoreV1().Pods(ns).List(ctx, sel) }},
	} {
		obj, err := l.list()
		if err != nil {
			t.Fatalf("list %ss in %s: %v", l.kind, ns, err)
		}
		items, err := meta.ExtractList(obj)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range items {
			m, err := meta.Accessor(o)
			if err != nil {
				t.Fatal(err)
			}
			left = append(left, l.kind+"/"+m.GetName())
		}
	}
	rs, err := c.AppsV1().ReplicaSets(ns).List(ctx, sel)
	if err != nil {
		t.Fatalf("list replicasets in %s: %v", ns, err)
	}
	for _, o := range rs.Items {
		if o.DeletionTimestamp == nil && len(o.OwnerReferences) == 0 {
			left = append(left, "orphaned replicaset/"+o.Name)
		}
	}
	return left
}

// RouteLeftovers lists the HTTPRoutes carrying a run id (deploy.LabelRunID)
// that any measure --route httproute run left in namespace ns: RunLeftovers'
// check for the Gateway API object it cannot list through the typed
// client. A cluster without the Gateway API CRDs has none to leave.
func RouteLeftovers(t testing.TB, dyn dynamic.Interface, ns string) []string {
	t.Helper()
	list, err := dyn.Resource(deploy.HTTPRouteResource).Namespace(ns).List(context.Background(), metav1.ListOptions{LabelSelector: deploy.LabelRunID})
	if apierrors.IsNotFound(err) {
		return nil // no such resource: the CRDs are not installed
	}
	if err != nil {
		t.Fatalf("list httproutes in %s: %v", ns, err)
	}
	var left []string
	for _, o := range list.Items {
		left = append(left, "httproute/"+o.GetName())
	}
	return left
}

// ReadResults decodes the results file at path (measure --out).
func ReadResults(t testing.TB, path string) *results.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file, err := results.Decode(f)
	if err != nil {
		t.Fatalf("results file %s does not decode: %v", path, err)
	}
	return file
}

// ExitCode is the exit status of a command run with exec (0 on success, -1
// when it did not run to an exit).
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// Run runs cfg to the end within timeout, logging its progress but the
// trials' stage-by-stage reports, fails the test on an error or a missing
// trial record, and returns the sink.
func Run(t *testing.T, cfg measure.Config, timeout time.Duration) *Sink {
	t.Helper()
	sink := NewSink()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := measure.Run(ctx, cfg, sink, func(p measure.Progress) {
		if p.Phase != "trial" || p.Stage == "released" {
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
