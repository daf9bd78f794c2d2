package deploy

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// In-cluster load runners (measure --in-cluster-load): pods of the probe's
// image running `epwindow load` against the probe Service's ClusterIP.
const (
	// RunnerContainer is the runner pods' container name.
	RunnerContainer = "load"
	// RunnerNameValue is LabelName on runner pods; the probe's selector
	// (LabelName NameValue) never matches them.
	RunnerNameValue = "epwindow-load"
	// DefaultStatsPort is where a runner serves /stats, /clock, /healthz.
	DefaultStatsPort = 9090
)

// RunnerParams are one run's in-cluster runners.
type RunnerParams struct {
	// Count runner pods, at most one per node (see RunnerDeployment).
	Count int
	// Target is the one URL they send to: the Service's ClusterIP and port.
	Target string
	// Rate is each runner's requests per second.
	Rate float64
	// Lifetime is how long each runner sends before it stops by itself and
	// idles, counted on the runner's own clock from its start (so clock
	// skew between the tool and the node cannot move it).
	Lifetime time.Duration
	// Streams, StreamProtocol and Reconnect make each runner also hold
	// long-lived streams to Target (measure --streams); 0: none.
	Streams        int
	StreamProtocol string
	Reconnect      string
	// GRPCTarget and GRPCRate make each runner also call the probe's gRPC
	// port through the cluster DNS (dns:///NAME:PORT of the headless
	// Service; measure --grpc-dns-rate with --in-cluster-load); "": none.
	GRPCTarget string
	GRPCRate   float64
	// GRPCWaitAddrs holds each runner's gRPC client back until DNS answers
	// this many addresses (the probe's replicas).
	GRPCWaitAddrs int
}

// RunnerSelector selects the runner pods of workload name (and run id).
func (p Params) RunnerSelector() map[string]string {
	s := map[string]string{LabelName: RunnerNameValue, LabelInstance: p.Name}
	if p.RunID != "" {
		s[LabelRunID] = p.RunID
	}
	return s
}

// RunnerDeployment builds the Deployment of rp.Count runner pods from the
// rendered probe pod template of wl, so they carry its hardening (Pod
// Security restricted: non-root, no privilege escalation, capabilities
// dropped, RuntimeDefault seccomp, read-only root) and its image. A
// Deployment, not bare pods, because measure may already create
// Deployments in the run's namespace: the runners need no permission
// beyond RequiredPermissions, and nothing cluster-wide. They run `epwindow
// load` with a new connection per request, so that kube-proxy routes each
// request anew. A topology spread constraint over kubernetes.io/hostname
// (DoNotSchedule, tainted nodes left out) puts them on distinct nodes while
// Count does not exceed the schedulable nodes, which measure checks. Past
// its lifetime a runner idles (it does not exit, which would restart it)
// and keeps its statistics until the run's cleanup deletes it.
func RunnerDeployment(wl *Workload, p Params, rp RunnerParams) (*appsv1.Deployment, error) {
	if rp.Count < 1 {
		return nil, fmt.Errorf("--in-cluster-load (%d): want at least 1 runner", rp.Count)
	}
	if rp.Lifetime <= 0 {
		return nil, fmt.Errorf("runner lifetime %s must be positive", rp.Lifetime)
	}
	if !(rp.Rate > 0) {
		return nil, fmt.Errorf("--in-cluster-rate (%g) must be above 0", rp.Rate)
	}
	probe := container(wl.Deployment)
	if probe == nil {
		return nil, fmt.Errorf("deployment has no container %q", ProbeContainer)
	}
	tmpl := wl.Deployment.Spec.Template.DeepCopy()
	c := probe.DeepCopy()
	c.Name = RunnerContainer
	c.Command = []string{"epwindow", "load",
		"--url=" + rp.Target,
		"--rate=" + strconv.FormatFloat(rp.Rate, 'f', -1, 64),
		"--deadline=" + rp.Lifetime.String(),
		fmt.Sprintf("--stats-listen=:%d", DefaultStatsPort)}
	if rp.Streams > 0 {
		c.Command = append(c.Command, "--streams="+strconv.Itoa(rp.Streams),
			"--stream-protocol="+rp.StreamProtocol, "--reconnect="+rp.Reconnect)
	}
	if rp.GRPCTarget != "" {
		c.Command = append(c.Command, "--grpc-url="+rp.GRPCTarget, "--grpc-rate="+strconv.FormatFloat(rp.GRPCRate, 'f', -1, 64))
		if rp.GRPCWaitAddrs > 0 {
			c.Command = append(c.Command, "--grpc-wait-addrs="+strconv.Itoa(rp.GRPCWaitAddrs))
		}
	}
	c.Env = []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}
	c.Ports = []corev1.ContainerPort{{Name: "stats", ContainerPort: DefaultStatsPort, Protocol: corev1.ProtocolTCP}}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/healthz", Port: intstr.FromInt32(DefaultStatsPort)}}, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1}
	c.Lifecycle = nil
	tmpl.Spec.Containers = []corev1.Container{*c}
	grace := int64(2) // the runner stops at once on SIGTERM
	tmpl.Spec.TerminationGracePeriodSeconds = &grace
	sel := p.RunnerSelector()
	honor := corev1.NodeInclusionPolicyHonor
	tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, NodeTaintsPolicy: &honor,
	}}
	labels := map[string]string{}
	for k, v := range tmpl.Labels {
		labels[k] = v
	}
	for k, v := range sel {
		labels[k] = v
	}
	tmpl.Labels = labels
	replicas := int32(rp.Count)
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: RunnerName(p.Name), Namespace: p.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: *tmpl, Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}},
	}
	return d, nil
}

// RunnerName is the name of the runner Deployment of workload name.
func RunnerName(name string) string { return name + "-load" }
