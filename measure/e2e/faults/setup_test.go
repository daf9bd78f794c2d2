package faults

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/measure"
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

// interruptBeforeIngressOf gives cfg a client whose transport cuts the
// Ingress POST short and cancels the run (cancel).
func interruptBeforeIngressOf(t *testing.T, cfg *measure.Config, cancel context.CancelFunc) *interruptBeforeIngress {
	t.Helper()
	rc := rest.CopyConfig(cluster.Config)
	tr := &interruptBeforeIngress{cancel: cancel, held: make(chan string, 1)}
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { tr.next = rt; return tr }
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.RESTConfig = client, rc
	return tr
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
	tr := interruptBeforeIngressOf(t, &cfg, cancel)
	sink := e2etest.NewSink()
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
	if len(sink.Records) != 0 || sink.Meta != nil {
		t.Errorf("an interrupted setup wrote a header or trials")
	}
	if ns, pods := leftovers(t); len(ns)+len(pods) > 0 {
		t.Errorf("an interrupted setup left namespaces %v and probe pods %v", ns, pods)
	}
}

// The same Ctrl-C with --namespace: the run made its Service and Deployment
// in an existing namespace and was cut before its Ingress. Cleanup must
// delete exactly those (and wait for their pods) and leave the namespace and
// its other objects alone.
func TestInterruptBetweenDeploymentAndIngressInExistingNamespace(t *testing.T) {
	bg := context.Background()
	ns := testNamespacePrefix + "team-" + suffix(t)
	if _, err := admin.CoreV1().Namespaces().Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(t, ns) })
	// Another team's object that a careless cleanup (a namespace delete, a
	// delete by label) would take with it.
	other, err := admin.CoreV1().ConfigMaps(ns).Create(bg, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe",
		Labels: map[string]string{deploy.LabelManagedBy: deploy.ManagedByValue, deploy.LabelName: deploy.NameValue}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	cfg := baseConfig(t)
	cfg.Namespace = ns
	tr := interruptBeforeIngressOf(t, &cfg, cancel)
	runErr := measureRun(ctx, cfg, e2etest.NewSink())
	select {
	case <-tr.held:
	default:
		t.Fatalf("measure never tried to create its Ingress (run error: %v)", runErr)
	}
	if !errors.Is(runErr, context.Canceled) {
		t.Errorf("run error %v, want context.Canceled", runErr)
	}

	// Nothing carrying a run id is left in ns, not even a terminating pod.
	if left := e2etest.RunLeftovers(t, admin, ns); len(left) > 0 {
		t.Errorf("an interrupted setup in --namespace %s left %v", ns, left)
	}
	got, err := admin.CoreV1().Namespaces().Get(bg, ns, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp != nil {
		t.Fatalf("namespace %s after the run: %v (deletionTimestamp %v): measure must not delete it", ns, err, got.GetDeletionTimestamp())
	}
	if cm, err := admin.CoreV1().ConfigMaps(ns).Get(bg, "probe", metav1.GetOptions{}); err != nil || cm.UID != other.UID {
		t.Errorf("the other object in %s after the run: %v (uid %s, was %s)", ns, err, cm.GetUID(), other.UID)
	}
}
