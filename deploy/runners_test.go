package deploy

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func testRunners() RunnerParams {
	return RunnerParams{Count: 2, Target: "http://10.96.3.4:8080/", Rate: 150,
		Lifetime: 17*time.Minute + 30*time.Second}
}

func TestRunnerDeployment(t *testing.T) {
	p := testParams()
	wl := mustRender(t, p)
	d, err := RunnerDeployment(wl, p, testRunners())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "probe-load" || d.Namespace != p.Namespace || *d.Spec.Replicas != 2 {
		t.Errorf("deployment %s/%s replicas %d", d.Namespace, d.Name, *d.Spec.Replicas)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	// Never a probe pod: not behind the Service, not watched as a probe.
	if labels.SelectorFromSet(wl.Service.Spec.Selector).Matches(podLabels) ||
		labels.SelectorFromSet(wl.Deployment.Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Errorf("runner labels %v match the probe's selector", podLabels)
	}
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(podLabels) || podLabels[LabelRunID] != "run-1" || podLabels["team"] != "platform" {
		t.Errorf("runner labels %v (selector %v)", podLabels, d.Spec.Selector.MatchLabels)
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("containers %v", spec.Containers)
	}
	c := spec.Containers[0]
	want := []string{"epwindow", "load", "--url=http://10.96.3.4:8080/", "--rate=150", "--deadline=17m30s", "--stats-listen=:9090"}
	if !slices.Equal(c.Command, want) || c.Image != p.Image || c.Lifecycle != nil {
		t.Errorf("container command %q image %s lifecycle %v", c.Command, c.Image, c.Lifecycle)
	}
	for _, a := range c.Command {
		if strings.HasPrefix(a, "--keepalive") {
			t.Error("runners must open a connection per request")
		}
	}
	if len(spec.TopologySpreadConstraints) != 1 {
		t.Fatalf("topology spread %v", spec.TopologySpreadConstraints)
	}
	tsc := spec.TopologySpreadConstraints[0]
	if tsc.TopologyKey != corev1.LabelHostname || tsc.WhenUnsatisfiable != corev1.DoNotSchedule || tsc.MaxSkew != 1 ||
		!labels.SelectorFromSet(tsc.LabelSelector.MatchLabels).Matches(podLabels) || *tsc.NodeTaintsPolicy != corev1.NodeInclusionPolicyHonor {
		t.Errorf("topology spread %+v", tsc)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("runner pods mount a service account token; they never call the API server")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Port.IntValue() != DefaultStatsPort {
		t.Errorf("readiness %+v", c.ReadinessProbe)
	}
	// The probe's own template is untouched.
	if container(wl.Deployment).Lifecycle == nil {
		t.Error("RunnerDeployment changed the probe's container")
	}
}

func TestRunnerDeploymentRefuses(t *testing.T) {
	p := testParams()
	wl := mustRender(t, p)
	for _, tt := range []struct {
		mod  func(*RunnerParams)
		want string
	}{
		{func(r *RunnerParams) { r.Count = 0 }, "--in-cluster-load"},
		{func(r *RunnerParams) { r.Rate = 0 }, "--in-cluster-rate"},
		{func(r *RunnerParams) { r.Rate = -2 }, "--in-cluster-rate"},
	} {
		rp := testRunners()
		tt.mod(&rp)
		if _, err := RunnerDeployment(wl, p, rp); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error naming %s", rp, err, tt.want)
		}
	}
}

func TestRunnerDeploymentStreams(t *testing.T) {
	p := testParams()
	wl := mustRender(t, p)
	rp := testRunners()
	rp.Streams, rp.StreamProtocol, rp.Reconnect = 50, "grpc", "grpc-default"
	d, err := RunnerDeployment(wl, p, rp)
	if err != nil {
		t.Fatal(err)
	}
	cmd := strings.Join(d.Spec.Template.Spec.Containers[0].Command, " ")
	if !strings.Contains(cmd, "--streams=50 --stream-protocol=grpc --reconnect=grpc-default") {
		t.Errorf("runner command %q lacks the streams", cmd)
	}
}

func TestRunnerDeploymentGRPC(t *testing.T) {
	p := testParams()
	wl := mustRender(t, p)
	rp := testRunners()
	rp.GRPCTarget, rp.GRPCRate, rp.GRPCWaitAddrs = "dns:///probe-headless.ns.svc.cluster.local:8081", 12.5, 3
	d, err := RunnerDeployment(wl, p, rp)
	if err != nil {
		t.Fatal(err)
	}
	cmd := strings.Join(d.Spec.Template.Spec.Containers[0].Command, " ")
	if !strings.Contains(cmd, "--grpc-url=dns:///probe-headless.ns.svc.cluster.local:8081 --grpc-rate=12.5 --grpc-wait-addrs=3") {
		t.Errorf("runner command %q lacks the gRPC client", cmd)
	}
}
