package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
)

// The namespaced variant end to end, as a platform team without cluster-wide
// write access uses it: an administrator applies deploy/rbac/namespaced (its
// namespace, Role and read-only ClusterRole, bound to user "restricted"),
// and `epwindow measure --namespace` runs there as that user. The namespace
// already holds a workload carrying the probe's own labels (a Deployment
// rendered from the same manifests, named "probe", and its Service).
//
// The run must measure (every trial valid), and afterwards the namespace,
// the Role and the bystanders are as they were — same UIDs, the
// Deployment's generation unchanged, no pod replaced — and nothing with the
// run's id is left.
func TestMeasureInExistingNamespace(t *testing.T) {
	ctx := context.Background()
	bin := e2etest.Bin(t)
	ns := "team-" + suffix(t)
	apply(t, "namespaced", ns)
	authz := restricted.AuthorizationV1()
	if m := eventually(t, func() ([]deploy.Perm, error) {
		return deploy.Check(ctx, authz, ns, deploy.RequiredPermissions(false))
	}); len(m) != 0 {
		t.Fatalf("deploy/rbac/namespaced applied in %s, still missing: %v", ns, m)
	}

	// The bystanders: measure's own manifests and labels, without a run id.
	wl, err := deploy.Render(deploy.Params{Namespace: ns, Name: "probe", Replicas: 2, Image: deploy.DefaultImage,
		IngressClass: "skipper", Hold: time.Second, PreStop: true})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := admin.CoreV1().Services(ns).Create(ctx, wl.Service, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create bystander service: %v", err)
	}
	dep, err := admin.AppsV1().Deployments(ns).Create(ctx, wl.Deployment, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create bystander deployment: %v", err)
	}
	sel := labels.SelectorFromSet(wl.Deployment.Spec.Selector.MatchLabels).String()
	before := readyPods(t, ns, sel, 2)

	out := filepath.Join(t.TempDir(), "results.jsonl")
	cmd := exec.Command(bin, "measure", "--kubeconfig", cluster.RestrictedKubeconfig, "--namespace", ns,
		"--url", cluster.IngressURL, "--ingress-class", "skipper", "--observer", "skipper",
		"--observer-url", cluster.RoutesURL, "--observer-interval", "200ms", "--quiet-period", "2s",
		"--rate", "100", "--trials", "2", "--replicas", "2", "--trial-jitter", "1s", "--out", out)
	var stderr, stdout bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stdout
	runCtx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	go func() { <-runCtx.Done(); _ = cmd.Process.Kill() }()
	if err := cmd.Run(); err != nil {
		t.Fatalf("measure --namespace %s as the restricted user: %v\nstderr:\n%s", ns, err, stderr.String())
	}
	file := e2etest.ReadResults(t, out)
	if file.Header == nil || file.Header.Namespace != ns {
		t.Errorf("results header %+v, want namespace %s", file.Header, ns)
	}
	if c := file.Summary; c == nil || c.Cost == nil || c.Cost.APIRequests <= 0 || c.Cost.PeakRSSBytes <= 0 || c.Cost.ElapsedNS <= 0 {
		t.Errorf("results summary %+v: want the run's cost (API requests, peak RSS, duration)", c)
	}
	if len(file.Trials) != 2 {
		t.Fatalf("%d trials, want 2\nstderr:\n%s", len(file.Trials), stderr.String())
	}
	for _, r := range file.Trials {
		if !r.Valid {
			t.Errorf("trial %d invalid: %v", r.Trial, r.InvalidReason())
		}
	}

	// Nothing of the run's is left: every object it made carries its run id.
	if left := e2etest.RunLeftovers(t, admin, ns); len(left) > 0 {
		t.Errorf("measure --namespace left %v in %s", left, ns)
	}

	// The namespace, its Role and the bystanders are untouched.
	if got, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("namespace %s after the run: %v (deletionTimestamp %v); measure must not delete it", ns, err, got.GetDeletionTimestamp())
	}
	if _, err := admin.RbacV1().Roles(ns).Get(ctx, "epwindow-measure", metav1.GetOptions{}); err != nil {
		t.Errorf("Role epwindow-measure after the run: %v", err)
	}
	if got, err := admin.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{}); err != nil || got.UID != svc.UID {
		t.Errorf("bystander service after the run: %v (uid %s, was %s)", err, got.GetUID(), svc.UID)
	}
	if got, err := admin.AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{}); err != nil || got.UID != dep.UID || got.Generation != dep.Generation {
		t.Errorf("bystander deployment after the run: %v (uid %s→%s, generation %d→%d)", err, dep.UID, got.GetUID(), dep.Generation, got.GetGeneration())
	}
	after, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before) {
		t.Errorf("%d bystander pods after the run, %d before", len(after.Items), len(before))
	}
	for _, p := range after.Items {
		if _, ok := before[p.UID]; !ok || p.DeletionTimestamp != nil {
			t.Errorf("bystander pod %s (uid %s) replaced or terminating after the run; before: %v", p.Name, p.UID, before)
		}
	}
	if !strings.Contains(stderr.String(), "in namespace "+ns) {
		t.Errorf("progress does not say where the run's objects go:\n%s", stderr.String())
	}
}

// readyPods waits until n pods match sel in ns and are ready, and returns
// their names by UID.
func readyPods(t *testing.T, ns, sel string, n int) map[types.UID]string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		ready := map[types.UID]string{}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready[p.UID] = p.Name
				}
			}
		}
		if len(ready) == n && len(pods.Items) == n {
			return ready
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bystander pods ready after 2m", len(ready), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
