package faults

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
)

// Pods outside the run's namespace are never deleted or modified, even
// when they carry exactly the labels of measure's probe pods. A bystander
// namespace — itself labelled app.kubernetes.io/managed-by=epwindow, like
// another run's — runs a Deployment of `epwindow probe` pods rendered from
// the same manifests (app.kubernetes.io/name=epwindow-probe,
// app.kubernetes.io/instance=probe, app.kubernetes.io/managed-by=epwindow:
// the values measure gives its own). A run, which deletes its own pods and
// its namespace, must leave them all as they were: same pod UIDs, no
// deletionTimestamp, the Deployment's generation unchanged, the namespace
// still there; a watch on the bystander namespace for the whole run sees no
// pod deleted or marked for deletion.
//
// bystanders starts the bystander namespace and its watch; the check it
// returns, called once the run (sink, runErr) is over, stops the watch and
// asserts all that. The run with the blind observer carries it
// (TestObserverBlindMarksTrialsInvalid): its trials go on through the
// observer's faults, a harder case than a clean run, at no extra run's cost.
func bystanders(t *testing.T) (check func(sink *e2etest.Sink, runErr error)) {
	t.Helper()
	ctx := context.Background()
	ns := testNamespacePrefix + "bystander-" + suffix(t)
	wl, err := deploy.Render(deploy.Params{
		Namespace: ns, Name: "probe", Replicas: 2, Image: deploy.DefaultImage,
		IngressClass: ingressClass, Hold: time.Second, PreStop: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The same labels as measure's probe pods: the run id aside, which
	// measure adds to its own pods only.
	podLabels := wl.Deployment.Spec.Template.Labels
	for k, want := range map[string]string{deploy.LabelName: deploy.NameValue, deploy.LabelInstance: "probe",
		deploy.LabelManagedBy: deploy.ManagedByValue} {
		if podLabels[k] != want {
			t.Fatalf("bystander pod label %s=%q, want %q (measure's)", k, podLabels[k], want)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, wl.Namespace, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	t.Cleanup(func() { deleteNamespace(t, ns) })
	// Its Service has the probe Service's name and labels too (so its
	// EndpointSlices look like the run's); no Ingress, which would share the
	// run's host and take part of its load.
	if _, err := admin.CoreV1().Services(ns).Create(ctx, wl.Service, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create bystander service: %v", err)
	}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, wl.Deployment, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create bystander deployment: %v", err)
	}
	sel := labels.SelectorFromSet(wl.Deployment.Spec.Selector.MatchLabels).String()
	before := waitReady(t, ns, sel, 2)
	uids := map[types.UID]string{}
	for _, p := range before {
		uids[p.UID] = p.Name
	}
	dep, err := admin.AppsV1().Deployments(ns).Get(ctx, wl.Deployment.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsBefore, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Watch the bystander pods for the whole run.
	w, err := admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: dep.ResourceVersion})
	if err != nil {
		t.Fatalf("watch bystander pods: %v", err)
	}
	var (
		mu       sync.Mutex
		touched  []string
		watchEnd = make(chan struct{})
	)
	go func() {
		defer close(watchEnd)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			switch {
			case ev.Type == watch.Deleted:
				touched = append(touched, "deleted "+p.Name)
			case p.DeletionTimestamp != nil:
				touched = append(touched, "marked for deletion "+p.Name)
			case ev.Type == watch.Added && uids[p.UID] == "":
				touched = append(touched, "new pod "+p.Name+" (a bystander was replaced)")
			}
			mu.Unlock()
		}
	}()

	return func(sink *e2etest.Sink, runErr error) {
		t.Helper()
		w.Stop()
		<-watchEnd
		if runErr != nil || sink.Meta == nil {
			t.Fatalf("measure.Run: %v", runErr)
		}
		if sink.Meta.Namespace == ns {
			t.Fatalf("measure ran in the bystander namespace %s", ns)
		}

		// The watch has ended (watchEnd): touched is complete.
		for _, s := range touched {
			t.Errorf("during the run: %s", s)
		}
		after, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Items) != len(before) {
			t.Errorf("%d bystander pods after the run, %d before", len(after.Items), len(before))
		}
		for _, p := range after.Items {
			if _, ok := uids[p.UID]; !ok {
				t.Errorf("bystander pod %s (uid %s) is not one of the pods before the run: %v", p.Name, p.UID, uids)
			}
			if p.DeletionTimestamp != nil {
				t.Errorf("bystander pod %s has deletionTimestamp %s", p.Name, p.DeletionTimestamp)
			}
		}
		depAfter, err := admin.AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("bystander deployment after the run: %v", err)
		}
		if depAfter.Generation != dep.Generation {
			t.Errorf("bystander deployment generation %d after the run, %d before: its spec was changed", depAfter.Generation, dep.Generation)
		}
		nsAfter, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("bystander namespace after the run: %v", err)
		}
		if nsAfter.UID != nsBefore.UID || nsAfter.DeletionTimestamp != nil {
			t.Errorf("bystander namespace replaced or terminating: uid %s → %s, deletionTimestamp %v", nsBefore.UID, nsAfter.UID, nsAfter.DeletionTimestamp)
		}
	}
}
