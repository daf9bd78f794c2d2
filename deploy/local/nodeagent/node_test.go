package nodeagent

import (
	"context"
	"log/slog"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRegisterNodeTakesOverAndUntaints(t *testing.T) {
	// A Node as the API server's nodetaint admission plugin leaves it.
	old := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}, Spec: v1.NodeSpec{Taints: []v1.Taint{
		{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule},
		{Key: "keep", Effect: v1.TaintEffectNoSchedule},
	}}}
	client := fake.NewClientset(old)
	a := &agent{client: client, clock: clocktesting.NewFakeClock(t0), port: 10250, log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	if err := a.registerNode(ctx, "node-0", "10.244.0.0/24"); err != nil {
		t.Fatal(err)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, "node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "keep" {
		t.Errorf("taints %v, want only the not-ready one removed", n.Spec.Taints)
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 || len(n.Status.Conditions) == 0 {
		t.Errorf("status not set: %+v", n.Status)
	}

	// Heartbeat: the first renewal creates the Lease, the next renews it.
	if err := a.renewLease(ctx, "node-0"); err != nil {
		t.Fatal(err)
	}
	a.clock.(*clocktesting.FakeClock).Step(leaseRenew)
	if err := a.renewLease(ctx, "node-0"); err != nil {
		t.Fatal(err)
	}
	l, err := client.CoordinationV1().Leases(leaseNamespace).Get(ctx, "node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkLease(t, l)
}

func checkLease(t *testing.T, l *coordinationv1.Lease) {
	t.Helper()
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "node-0" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != leaseDuration {
		t.Errorf("lease spec %+v", l.Spec)
	}
	if l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(t0.Add(leaseRenew)) {
		t.Errorf("renewTime %v, want the second renewal at t0+%s", l.Spec.RenewTime, leaseRenew)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" {
		t.Errorf("lease owner %v, want the Node (garbage-collected with it)", l.OwnerReferences)
	}
}
