package nodeagent

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func running(ready bool) containerView {
	return containerView{Name: "app", Image: "img", Ever: true, Started: true, Ready: ready,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}}
}

func exited(code int32) containerView {
	return containerView{Name: "app", Image: "img", Ever: true,
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
}

func TestPodPhase(t *testing.T) {
	waiting := containerView{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	restarting := exited(1)
	for _, tc := range []struct {
		name string
		v    podView
		want v1.PodPhase
	}{
		{"not started", podView{InitDone: true, Containers: []containerView{waiting}}, v1.PodPending},
		{"one of two started", podView{InitDone: true, Containers: []containerView{running(true), waiting}}, v1.PodPending},
		{"init containers running", podView{InitContainers: []containerView{running(false)}, Containers: []containerView{waiting}}, v1.PodPending},
		{"running", podView{InitDone: true, Containers: []containerView{running(false)}}, v1.PodRunning},
		{"exited, restarting", podView{InitDone: true, Containers: []containerView{restarting}}, v1.PodRunning},
		{"terminal, all 0", podView{Terminal: true, Containers: []containerView{exited(0), exited(0)}}, v1.PodSucceeded},
		{"terminal, one killed", podView{Terminal: true, Containers: []containerView{exited(0), exited(137)}}, v1.PodFailed},
		{"terminal, never ran", podView{Terminal: true, Containers: []containerView{waiting}}, v1.PodFailed},
		// Sidecars (pkg/kubelet/kubelet_pods.go, getPhase): a started
		// one does not hold the pod Pending, a stopped one does not fail it.
		{"sidecar started, app waiting", podView{InitDone: true, InitContainers: []containerView{sidecar(running(true))}, Containers: []containerView{waiting}}, v1.PodPending},
		{"sidecar and app running", podView{InitDone: true, InitContainers: []containerView{sidecar(running(false))}, Containers: []containerView{running(true)}}, v1.PodRunning},
		{"sidecar restarting, app running", podView{InitDone: true, InitContainers: []containerView{sidecar(restarting)}, Containers: []containerView{running(true)}}, v1.PodRunning},
		{"terminal, sidecar killed", podView{Terminal: true, InitContainers: []containerView{sidecar(exited(137))}, Containers: []containerView{exited(0)}}, v1.PodSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podPhase(tc.v); got != tc.want {
				t.Fatalf("podPhase = %s, want %s", got, tc.want)
			}
		})
	}
}

// sidecar is c as a restartable init container.
func sidecar(c containerView) containerView {
	c.Name, c.Sidecar = "side", true
	return c
}

// The kubelet counts a sidecar's readiness toward the pod's and renders its
// status as a regular container's (status/generate.go,
// prober/prober_manager.go: UpdatePodStatus).
func TestSidecarStatus(t *testing.T) {
	notStarted := sidecar(running(false))
	notStarted.Started = false
	for _, tc := range []struct {
		name                  string
		side                  containerView
		started, ready, podOK bool
	}{
		{"ready", sidecar(running(true)), true, true, true},
		{"not ready", sidecar(running(false)), true, false, false},
		{"startup probe pending", notStarted, false, false, false},
		{"exited", sidecar(exited(0)), false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.side.RestartCount = 2
			v := podView{NetworkReady: true, InitDone: true, InitContainers: []containerView{exited(0), tc.side}, Containers: []containerView{running(true)}}
			v.Conditions = updateConditions(nil, wantConditions(v), t0)
			s := buildStatus(v)
			if len(s.InitContainerStatuses) != 2 {
				t.Fatalf("init container statuses %+v", s.InitContainerStatuses)
			}
			if init := s.InitContainerStatuses[0]; !init.Ready {
				t.Errorf("completed init container not ready: %+v", init)
			}
			cs := s.InitContainerStatuses[1]
			if cs.Started == nil || *cs.Started != tc.started || cs.Ready != tc.ready || cs.RestartCount != 2 {
				t.Errorf("sidecar status started %v ready %v restartCount %d, want %v %v 2", ptrOr(cs.Started), cs.Ready, cs.RestartCount, tc.started, tc.ready)
			}
			if got := v.Conditions[v1.PodReady].Status; got != tc.podOK || v.Conditions[v1.ContainersReady].Status != tc.podOK {
				t.Errorf("Ready %v, want %v", got, tc.podOK)
			}
		})
	}
}

func ptrOr(b *bool) bool { return b != nil && *b }

func TestUpdateConditionsKeepsTransitionTimes(t *testing.T) {
	c1 := updateConditions(nil, map[v1.PodConditionType]bool{v1.PodReady: false, v1.PodInitialized: true}, t0)
	c2 := updateConditions(c1, map[v1.PodConditionType]bool{v1.PodReady: true, v1.PodInitialized: true}, t0.Add(time.Second))
	if !c2[v1.PodInitialized].Since.Equal(t0) {
		t.Errorf("unchanged Initialized moved to %s", c2[v1.PodInitialized].Since)
	}
	if got := c2[v1.PodReady]; !got.Status || !got.Since.Equal(t0.Add(time.Second)) {
		t.Errorf("Ready = %+v, want true since t0+1s", got)
	}
}

func TestBuildStatus(t *testing.T) {
	v := podView{HostIP: "127.0.0.1", PodIP: "10.244.1.7", StartTime: t0, NetworkReady: true, InitDone: true,
		InitContainers: []containerView{exited(0)}, Containers: []containerView{running(true)}}
	v.Conditions = updateConditions(nil, wantConditions(v), t0)
	s := buildStatus(v)
	if s.Phase != v1.PodRunning || s.PodIP != "10.244.1.7" || len(s.PodIPs) != 1 || s.PodIPs[0].IP != s.PodIP ||
		s.HostIP != "127.0.0.1" || len(s.HostIPs) != 1 || s.StartTime == nil {
		t.Fatalf("addresses/phase wrong: %+v", s)
	}
	got := map[v1.PodConditionType]v1.ConditionStatus{}
	for _, c := range s.Conditions {
		got[c.Type] = c.Status
	}
	for _, ct := range ownedConditions {
		if got[ct] != v1.ConditionTrue {
			t.Errorf("condition %s = %q, want True", ct, got[ct])
		}
	}
	if _, ok := got[v1.PodScheduled]; ok {
		t.Error("PodScheduled belongs to the scheduler, not the agent")
	}
	if len(s.InitContainerStatuses) != 1 || s.InitContainerStatuses[0].State.Terminated == nil {
		t.Errorf("init container statuses %+v", s.InitContainerStatuses)
	}
	cs := s.ContainerStatuses[0]
	if !cs.Ready || cs.Started == nil || !*cs.Started || cs.State.Running == nil {
		t.Errorf("container status %+v, want ready, started, running", cs)
	}

	// Terminating: the probe failed, so not ready; the pod stays Running.
	v.Containers = []containerView{running(false)}
	v.Conditions = updateConditions(v.Conditions, wantConditions(v), t0.Add(time.Second))
	s = buildStatus(v)
	for _, c := range s.Conditions {
		if (c.Type == v1.PodReady || c.Type == v1.ContainersReady) && (c.Status != v1.ConditionFalse || c.Reason != "ContainersNotReady") {
			t.Errorf("%s = %s/%s, want False/ContainersNotReady", c.Type, c.Status, c.Reason)
		}
	}

	// Done: killed, terminal, nothing ready.
	v.Terminal = true
	v.Containers = []containerView{exited(137)}
	v.Conditions = updateConditions(v.Conditions, wantConditions(v), t0.Add(2*time.Second))
	s = buildStatus(v)
	if s.Phase != v1.PodFailed || s.ContainerStatuses[0].Ready || s.ContainerStatuses[0].State.Terminated.ExitCode != 137 {
		t.Errorf("terminal status %+v, want Failed with exit 137", s)
	}
}

func TestStatusPatchCarriesUID(t *testing.T) {
	st := buildStatus(podView{HostIP: "127.0.0.1", Containers: []containerView{running(false)}})
	b, err := statusPatch("u-1", &st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["metadata"]["uid"] != "u-1" || m["status"]["hostIP"] != "127.0.0.1" {
		t.Fatalf("patch %s lacks the UID precondition or the status", b)
	}
	if strings.Contains(string(b), "PodScheduled") {
		t.Fatalf("patch %s touches PodScheduled", b)
	}
}

func TestNodeObject(t *testing.T) {
	n := nodeObject("node-1", "10.244.1.0/24", 10250, t0)
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			ready = c.Status == v1.ConditionTrue
		}
	}
	if !ready {
		t.Error("node not Ready")
	}
	if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Type != v1.NodeInternalIP || n.Status.Addresses[0].Address != "127.0.0.1" {
		t.Errorf("addresses %v, want InternalIP 127.0.0.1 first (the API server dials it)", n.Status.Addresses)
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet endpoint port %d, want 10250", n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	for _, r := range []v1.ResourceName{v1.ResourcePods, v1.ResourceCPU, v1.ResourceMemory} {
		if q, ok := n.Status.Allocatable[r]; !ok || q.IsZero() {
			t.Errorf("allocatable %s missing: the scheduler would not bind", r)
		}
	}
	if n.Spec.PodCIDR != "10.244.1.0/24" || n.Labels[v1.LabelHostname] != "node-1" {
		t.Errorf("podCIDR %q hostname label %q", n.Spec.PodCIDR, n.Labels[v1.LabelHostname])
	}
}

func TestNodeSubnets(t *testing.T) {
	for i, want := range []string{"10.244.0.0/24", "10.244.1.0/24", "10.244.9.0/24"} {
		if i == 2 {
			i = 9
		}
		got, err := nodeSubnet("10.244.0.0/16", i)
		if err != nil || got.String() != want {
			t.Errorf("nodeSubnet(%d) = %v, %v; want %s", i, got, err, want)
		}
		if gw := gateway(got); gw.String() != strings.TrimSuffix(want, "0/24")+"1" {
			t.Errorf("gateway of %s = %s", got, gw)
		}
	}
}

func TestValidateNetwork(t *testing.T) {
	ok := Config{Nodes: []string{"a"}, StateDir: "/tmp/x"}.withDefaults()
	if err := ok.validateNetwork(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"prefix with dash":           func(c *Config) { c.Prefix = "ep-w" },
		"long prefix":                func(c *Config) { c.Prefix = "epwindow" },
		"public CIDR":                func(c *Config) { c.PodCIDR = "8.8.0.0/16" },
		"not a /16":                  func(c *Config) { c.PodCIDR = "10.244.0.0/24" },
		"loopback CIDR":              func(c *Config) { c.PodCIDR = "127.1.0.0/16" },
		"no nodes":                   func(c *Config) { c.Nodes = nil },
		"duplicate node":             func(c *Config) { c.Nodes = []string{"a", "a"} },
		"relative statedir":          func(c *Config) { c.StateDir = "x" },
		"service CIDR overlaps pods": func(c *Config) { c.ServiceCIDR = "10.244.128.0/17" },
		"public service CIDR":        func(c *Config) { c.ServiceCIDR = "8.8.0.0/16" },
		"service CIDR not masked":    func(c *Config) { c.ServiceCIDR = "10.96.0.1/16" },
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			mod(&c)
			if err := c.validateNetwork(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// With a service CIDR the pod routes the pod CIDR and the service CIDR
// through its node's gateway; without one it has no route beyond its
// subnet.
func TestBridgeConfListRoutes(t *testing.T) {
	cfg := Config{Nodes: []string{"node-0", "node-1"}, StateDir: "/tmp/x"}.withDefaults()
	b, err := bridgeConfList(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "routes") {
		t.Errorf("routes without a service CIDR:\n%s", b)
	}
	cfg.ServiceCIDR = "10.96.0.0/16"
	if err := cfg.validateNetwork(); err != nil {
		t.Fatal(err)
	}
	b, err = bridgeConfList(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			IPAM struct {
				Routes []struct{ Dst, GW string }
			}
		}
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	got := conf.Plugins[0].IPAM.Routes
	want := []struct{ Dst, GW string }{{"10.244.0.0/16", "10.244.1.1"}, {"10.96.0.0/16", "10.244.1.1"}}
	if !slices.Equal(got, want) {
		t.Errorf("routes %+v, want %+v", got, want)
	}
	if a, err := cfg.HostAddr(); err != nil || a.String() != "10.244.0.1" {
		t.Errorf("HostAddr = %v, %v; want 10.244.0.1", a, err)
	}
}
