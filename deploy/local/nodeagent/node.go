package nodeagent

import (
	"context"
	"fmt"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Heartbeats, as the kubelet's defaults (pkg/kubelet/apis/config/v1beta1
// defaults): lease renewed every 10 s for 40 s; node status reported every
// 10 s here (the kubelet reports an unchanged status only every 5 min, but
// a fresher NodeReady heartbeat costs nothing on this cluster).
const (
	leaseDuration  = 40
	leaseRenew     = 10 * time.Second
	statusInterval = 10 * time.Second
)

// leaseNamespace holds the nodes' Leases.
const leaseNamespace = "kube-node-lease"

// kubeletVersion is reported in Node.status.nodeInfo.
const kubeletVersion = "v1.37.2"

// nodeObject is the Node the agent registers for name: Ready, reachable at
// 127.0.0.1:port (the kubelet API), subnet podCIDR.
func nodeObject(name, podCIDR string, port int, now time.Time) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				v1.LabelHostname:   name,
				v1.LabelOSStable:   runtime.GOOS,
				v1.LabelArchStable: runtime.GOARCH,
			},
		},
		Spec: v1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
	}
	n.Status = nodeStatus(port, now, now)
	return n
}

// nodeStatus is a Ready node's status; readySince is the Ready condition's
// transition time, now its heartbeat.
func nodeStatus(port int, readySince, now time.Time) v1.NodeStatus {
	capacity := v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory:           resource.MustParse("16Gi"),
		v1.ResourcePods:             *resource.NewQuantity(110, resource.DecimalSI),
		v1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
	}
	cond := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		return v1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(readySince)}
	}
	return v1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions: []v1.NodeCondition{
			cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "epwindow node agent is posting ready status"),
		},
		Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: v1.NodeHostName, Address: "localhost"},
		},
		DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: int32(port)}},
		NodeInfo: v1.NodeSystemInfo{
			KubeletVersion:          kubeletVersion,
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "epwindow-nodeagent://" + kubeletVersion,
			KernelVersion:           "",
			OSImage:                 "epwindow local cluster",
		},
	}
}

// registerNode creates (or takes over) the Node object and sets its status.
func (a *agent) registerNode(ctx context.Context, name, podCIDR string) error {
	now := a.clock.Now()
	want := nodeObject(name, podCIDR, a.port, now)
	nodes := a.client.CoreV1().Nodes()
	created, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = nodes.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			created.Labels = want.Labels
			created.Spec.Unschedulable = false
			created, err = nodes.Update(ctx, created, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", name, err)
	}
	created.Status = want.Status
	if created, err = nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set status of node %s: %w", name, err)
	}
	// The TaintNodesByCondition admission plugin taints every new Node
	// not-ready:NoSchedule (plugin/pkg/admission/nodetaint); the
	// node-lifecycle controller removes it once the node is Ready. The
	// local cluster need not run that controller, so the agent, whose
	// nodes are Ready from the start, removes it itself.
	if kept := withoutNotReady(created.Spec.Taints); len(kept) != len(created.Spec.Taints) {
		created.Spec.Taints = kept
		if _, err := nodes.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("remove the not-ready taint of node %s: %w", name, err)
		}
	}
	return nil
}

// withoutNotReady drops the node.kubernetes.io/not-ready taints.
func withoutNotReady(taints []v1.Taint) []v1.Taint {
	var out []v1.Taint
	for _, t := range taints {
		if t.Key != v1.TaintNodeNotReady {
			out = append(out, t)
		}
	}
	return out
}

// heartbeat keeps one node Ready until ctx ends: Lease renewals and
// NodeReady status updates (the node-lifecycle controller watches both).
func (a *agent) heartbeat(ctx context.Context, name string) {
	readySince := a.clock.Now()
	lastStatus := time.Time{}
	for {
		if err := a.renewLease(ctx, name); err != nil && ctx.Err() == nil {
			a.log.Warn("node lease", "node", name, "err", err)
		}
		if a.clock.Since(lastStatus) >= statusInterval {
			if err := a.updateNodeStatus(ctx, name, readySince); err != nil && ctx.Err() == nil {
				a.log.Warn("node status", "node", name, "err", err)
			} else {
				lastStatus = a.clock.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(leaseRenew):
		}
	}
}

func (a *agent) updateNodeStatus(ctx context.Context, name string, readySince time.Time) error {
	n, err := a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.Status = nodeStatus(a.port, readySince, a.clock.Now())
	_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// renewLease creates or renews the node's Lease in kube-node-lease.
func (a *agent) renewLease(ctx context.Context, name string) error {
	leases := a.client.CoordinationV1().Leases(leaseNamespace)
	now := metav1.NewMicroTime(a.clock.Now())
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: leaseNamespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(leaseDuration)),
				RenewTime:            &now,
			},
		}
		if node, err := a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			// The namespace is made by the API server shortly after start.
			_, _ = a.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}, metav1.CreateOptions{})
		}
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.HolderIdentity = ptr.To(name)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(leaseDuration))
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}
