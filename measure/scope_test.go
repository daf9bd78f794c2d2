package measure

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestWatchesScoped: on a production cluster of thousands of Services, a
// run's watches must cost the API server only the run's own objects. Every
// list and watch of pods and EndpointSlices the watcher sends (recorded by
// the clientset, request by request) is in the run's namespace and carries
// its label selector: never cluster-wide, never the namespace's every pod.
func TestWatchesScoped(t *testing.T) {
	cs := fake.NewClientset()
	sel := labels.SelectorFromSet(labels.Set{"app": "probe", "epwindow.io/run": "abc123"})
	w := newWatcher(cs, clocktesting.NewFakeClock(time.Unix(0, 0)), "epwindow-abc123", sel, "probe")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	w.wait()
	seen := map[string]int{}
	for _, a := range cs.Actions() {
		res := a.GetResource().Resource
		if res != "pods" && res != "endpointslices" {
			continue
		}
		var sel labels.Selector
		switch a := a.(type) {
		case k8stesting.ListAction:
			sel = a.GetListRestrictions().Labels
		case k8stesting.WatchAction:
			sel = a.GetWatchRestrictions().Labels
		default:
			continue
		}
		seen[a.GetVerb()+" "+res]++
		if a.GetNamespace() != "epwindow-abc123" {
			t.Errorf("%s %s in namespace %q: want only the run's namespace", a.GetVerb(), res, a.GetNamespace())
		}
		if sel == nil || sel.Empty() {
			t.Errorf("%s %s without a label selector", a.GetVerb(), res)
		}
	}
	for _, want := range []string{"list pods", "watch pods", "list endpointslices", "watch endpointslices"} {
		if seen[want] == 0 {
			t.Errorf("no %s recorded (%v): the check saw nothing to check", want, seen)
		}
	}
}
