package e2etest

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/deploy"
)

// TeamApp is a team's own app for measure --target on the local cluster:
// the probe run as a fast-exiting app (it closes its listener at SIGTERM),
// so that its own record is the ground truth for the sidecar's.
type TeamApp struct {
	Namespace, Name string
	Replicas        int32
	// PreStopSleep is the app's lifecycle.preStop.sleep (0: no preStop).
	PreStopSleep int64
}

// Labels are the app's pods' labels, its selector's and its Service's.
func (a TeamApp) Labels() map[string]string { return map[string]string{"app": a.Name} }

// Create makes the namespace, the Deployment and a Service (port 80 to the
// app's 8080) named a.Name. The readiness probe is exec: an HTTP one
// would connect to the app's port from the node's address, which on the
// local cluster is also the ingresses' (they run on the machine), so the
// kubelet's probes would count as traffic.
func (a TeamApp) Create(ctx context.Context, c kubernetes.Interface) error {
	grace := int64(20)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.Namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	app := corev1.Container{
		Name: "app",
		// The local node agent runs command[0] from bin/ and ignores the
		// image; the API server requires one.
		Image:   deploy.DefaultImage,
		Command: []string{"epwindow", "probe", "--listen=:8080", "--exit-on-sigterm"},
		Env:     []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
			PeriodSeconds: 1},
	}
	if a.PreStopSleep > 0 {
		app.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: a.PreStopSleep}}}
	}
	replicas := a.Replicas
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: a.Name, Namespace: a.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: a.Labels()},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: a.Labels()},
				Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{app}},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(a.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: a.Name, Namespace: a.Namespace}, Spec: corev1.ServiceSpec{Selector: a.Labels(),
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	_, err := c.CoreV1().Services(a.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	return err
}
