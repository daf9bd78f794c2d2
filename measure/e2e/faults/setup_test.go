package faults

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/epwindow/epwindow/deploy"
)

// interruptBeforeIngress is a client transport that plays Ctrl-C at the
// worst moment of setup: the probe Deployment exists and its pods do, but
// the Ingress is not created yet. It holds measure's POST of the Ingress
// until the pods exist, then cancels the run's context and fails the POST
// as a cancelled request would.
type interruptBeforeIngress struct {
	next   http.RoundTripper
	cancel context.CancelFunc
	held   chan string // the namespace whose Ingress POST was cut
}

func (t *interruptBeforeIngress) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/ingresses") {
		return t.next.RoundTrip(req)
	}
	// .../namespaces/<ns>/ingresses
	parts := strings.Split(req.URL.Path, "/")
	ns := parts[len(parts)-2]
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		pods, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
			LabelSelector: deploy.LabelName + "=" + deploy.NameValue})
		if err == nil && len(pods.Items) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.cancel()
	t.held <- ns
	return nil, context.Canceled
}

// A Ctrl-C that lands between the Deployment and the Ingress — pods exist,
// the run has not reached steady state — still cleans up: measure.Run
// returns (no panic), and the namespace and its pods are gone. This is the
// moment a random SIGINT hits only rarely (setup lasts ~100 ms), so it is
// forced here.
func TestInterruptBetweenDeploymentAndIngress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := baseConfig(t)
	rc := rest.CopyConfig(cluster.Config)
	tr := &interruptBeforeIngress{cancel: cancel, held: make(chan string, 1)}
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { tr.next = rt; return tr }
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.RESTConfig = client, rc
	sink := newMemSink()
	runErr := measureRun(ctx, cfg, sink)
	select {
	case ns := <-tr.held:
		t.Logf("Ingress POST in %s cut short after the probe pods existed; run error: %v", ns, runErr)
	default:
		t.Fatalf("measure never tried to create its Ingress (run error: %v)", runErr)
	}
	if !errors.Is(runErr, context.Canceled) {
		t.Errorf("run error %v, want context.Canceled", runErr)
	}
	if len(sink.trials) != 0 || sink.header != nil {
		t.Errorf("an interrupted setup wrote a header or trials")
	}
	if ns, pods := leftovers(t); len(ns)+len(pods) > 0 {
		t.Errorf("an interrupted setup left namespaces %v and probe pods %v", ns, pods)
	}
}
