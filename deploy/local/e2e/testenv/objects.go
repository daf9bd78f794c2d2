package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// PodCIDR is the local cluster's pod range.
var PodCIDR = netip.MustParsePrefix("10.244.0.0/16")

// ProbePort is where the probe listens in its pod.
const ProbePort = 8080

// ProbeDeployment is R replicas of `epwindow probe` (bin/epwindow, looked up
// by the node agent from command[0]'s base name) with a readiness probe on
// /healthz and a preStop httpGet on /prestop, as epwindow's own manifests
// have them.
func ProbeDeployment(name string, replicas int32, grace int64, hold time.Duration) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:    "probe",
						Image:   "epwindow:local",
						Command: []string{"epwindow", "probe"},
						Args:    []string{"--listen", fmt.Sprintf(":%d", ProbePort), "--hold", hold.String()},
						Env: []corev1.EnvVar{{
							Name:      "POD_NAME",
							ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
						}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: ProbePort}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/healthz", Port: intstr.FromInt32(ProbePort),
							}},
							PeriodSeconds:    1,
							FailureThreshold: 1,
						},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/prestop", Port: intstr.FromInt32(ProbePort)},
						}},
					}},
				},
			},
		},
	}
}

// Service selects app=name on port 80 → the probe's port.
func Service(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

// Ingress of class "skipper" sends every host's "/" to the Service.
func Ingress(name string) *networkingv1.Ingress {
	class := "skipper"
	prefix := networkingv1.PathTypePrefix
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.IngressSpec{
			IngressClassName: &class,
			Rules: []networkingv1.IngressRule{{
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path: "/", PathType: &prefix,
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: name, Port: networkingv1.ServiceBackendPort{Number: 80},
						}},
					}},
				}},
			}},
		},
	}
}

// CreateNamespace makes a namespace with a generated name.
func CreateNamespace(ctx context.Context, cs kubernetes.Interface, prefix string) (string, error) {
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	return ns.Name, nil
}

// PodReady reports the pod's Ready condition.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// EndpointState is one address's conditions in a Service's slices.
type EndpointState struct {
	Ready, Serving, Terminating bool
}

// SliceEndpoints maps each address in the Service's EndpointSlices to its
// conditions (nil condition = false, except ready/serving which the API
// defines as "unknown, treat as true" when nil; the controller always sets
// them).
func SliceEndpoints(slices []discoveryv1.EndpointSlice) map[string]EndpointState {
	out := map[string]EndpointState{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			st := EndpointState{
				Ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
				Serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
				Terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
			}
			for _, a := range ep.Addresses {
				out[a] = st
			}
		}
	}
	return out
}

// Routes is Skipper's route table, as GET /routes with Accept:
// application/json returns it (eskip/json.go).
type Routes []struct {
	ID      string `json:"id"`
	Backend *struct {
		Type      string   `json:"type"`
		Address   string   `json:"address"`
		Endpoints []string `json:"endpoints"`
	} `json:"backend"`
}

// RouteEndpoints is the set of backend addresses (host:port) in Skipper's
// route table.
func RouteEndpoints(ctx context.Context, routesURL string) (map[string]bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, routesURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", routesURL, resp.Status)
	}
	var rs Routes
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		return nil, fmt.Errorf("decode %s: %w", routesURL, err)
	}
	out := map[string]bool{}
	for _, r := range rs {
		if r.Backend == nil {
			continue
		}
		for _, e := range append(r.Backend.Endpoints, r.Backend.Address) {
			if e == "" {
				continue
			}
			if u, err := url.Parse(e); err == nil && u.Host != "" {
				e = u.Host
			}
			out[e] = true
		}
	}
	return out, nil
}

// Poll calls cond every interval until it returns true, an error, or the
// timeout passes; the error says what was awaited.
func Poll(ctx context.Context, what string, interval, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// ProbePod is the pod named in a probe's answer to a traffic request: its
// body is one line, "pod=NAME time=UNIXNS" (probe.AppendTrafficBody in the
// tool's module, which this one does not import); "" for anything else.
func ProbePod(body []byte) string {
	rest, ok := strings.CutPrefix(string(body), "pod=")
	if !ok {
		return ""
	}
	pod, _, ok := strings.Cut(rest, " time=")
	if !ok {
		return ""
	}
	return pod
}
