package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure"
)

var (
	// cluster is the package's local cluster, started once in TestMain.
	cluster *localcluster.Cluster
	// admin is a client of cluster's admin user.
	admin kubernetes.Interface
)

// ingressClass is the class measure's Ingress names; Skipper serves it.
const ingressClass = e2etest.IngressClass

// testNamespacePrefix marks the namespaces the tests themselves create
// (bystanders, Pod Security checks): they are not measure's leftovers.
const testNamespacePrefix = "faults-"

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/faults", localcluster.Options{IngressPoll: time.Second}, func(c *localcluster.Cluster) error {
		cluster = c
		var err error
		admin, err = kubernetes.NewForConfig(c.Config)
		return err
	})
}

// baseConfig is a quick, valid in-process run of 3 trials against the
// local cluster as its admin.
func baseConfig(t *testing.T) measure.Config {
	t.Helper()
	return e2etest.Config(t, cluster, admin)
}

// runMeasure runs measure.Run with a bounded context, logging phase changes
// and passing every progress report to onProgress (which must not block).
func runMeasure(t *testing.T, cfg measure.Config, onProgress func(measure.Progress)) (*e2etest.Sink, error) {
	t.Helper()
	sink := e2etest.NewSink()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	last := ""
	err := measure.Run(ctx, cfg, sink, func(p measure.Progress) {
		if onProgress != nil {
			onProgress(p)
		}
		line := fmt.Sprintf("%s trial %d/%d %s %s", p.Phase, p.Trial, p.Trials, p.Stage, p.Message)
		if line != last && (p.Phase != "steady" || !strings.HasPrefix(last, "steady")) {
			t.Logf("%s %s", time.Now().Format("15:04:05.000"), line)
		}
		last = line
	})
	return sink, err
}

// measureRun runs measure.Run on ctx without progress output.
func measureRun(ctx context.Context, cfg measure.Config, sink *e2etest.Sink) error {
	return measure.Run(ctx, cfg, sink, nil)
}

// leftovers lists what measure runs left behind: namespaces labelled as
// epwindow's and probe pods (labelled app.kubernetes.io/name=epwindow-probe)
// in any namespace, except those in the tests' own namespaces.
func leftovers(t *testing.T) (namespaces, pods []string) {
	t.Helper()
	ctx := context.Background()
	nsList, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{
		LabelSelector: deploy.LabelManagedBy + "=" + deploy.ManagedByValue})
	if err != nil {
		t.Fatalf("list namespaces: %v", err)
	}
	for _, ns := range nsList.Items {
		if !strings.HasPrefix(ns.Name, testNamespacePrefix) {
			namespaces = append(namespaces, ns.Name)
		}
	}
	podList, err := admin.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: deploy.LabelName + "=" + deploy.NameValue})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	for _, p := range podList.Items {
		if !strings.HasPrefix(p.Namespace, testNamespacePrefix) {
			pods = append(pods, p.Namespace+"/"+p.Name)
		}
	}
	return namespaces, pods
}

// suffix is a short random name suffix.
func suffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// deleteNamespace deletes a test's namespace and waits until it is gone, so
// the next test starts from a clean cluster. Pods are deleted with grace 0
// first: the probes' grace periods would otherwise hold the namespace.
func deleteNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zero := int64(0)
	_ = admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	if err := admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", ns, err)
		return
	}
	for {
		if _, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("namespace %s still there 2m after its deletion", ns)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitReady waits until n pods matching selector in ns are Running and
// Ready, and returns them.
func waitReady(t *testing.T, ns, selector string, n int) []corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		list, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			var ready []corev1.Pod
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
					ready = append(ready, p)
				}
			}
			if len(ready) == n {
				return ready
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d pods %s in %s not Ready within 2m (last list error: %v)", n, selector, ns, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
