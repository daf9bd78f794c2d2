package deploy

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

func TestRenderHeadless(t *testing.T) {
	p := testParams()
	if wl := mustRender(t, p); wl.Headless != nil {
		t.Fatalf("headless Service without Params.Headless: %v", wl.Headless.Name)
	}
	p.Headless, p.H2C, p.Port = true, true, 9090
	wl := mustRender(t, p)
	h := wl.Headless
	if h == nil {
		t.Fatal("no headless Service")
	}
	if h.Name != "probe-headless" || h.Namespace != wl.Service.Namespace {
		t.Errorf("headless Service %s/%s", h.Namespace, h.Name)
	}
	if h.Spec.ClusterIP != corev1.ClusterIPNone || h.Spec.PublishNotReadyAddresses {
		t.Errorf("spec: clusterIP %q, publishNotReadyAddresses %v; want None, false", h.Spec.ClusterIP, h.Spec.PublishNotReadyAddresses)
	}
	if !equality.Semantic.DeepEqual(h.Spec.Selector, wl.Service.Spec.Selector) || !equality.Semantic.DeepEqual(h.Labels, wl.Service.Labels) {
		t.Errorf("selector/labels differ from the Service's: %v %v", h.Spec.Selector, h.Labels)
	}
	if len(h.Spec.Ports) != 1 || h.Spec.Ports[0].Port != 9090 {
		t.Errorf("ports %v, want the run's port 9090", h.Spec.Ports)
	}
	if len(h.Annotations) != 0 {
		t.Errorf("annotations %v: the Traefik h2c annotation is the ingress Service's", h.Annotations)
	}
	p.HeadlessPublishNotReady = true
	if wl := mustRender(t, p); !wl.Headless.Spec.PublishNotReadyAddresses || wl.Service.Spec.PublishNotReadyAddresses {
		t.Errorf("HeadlessPublishNotReady: headless %v, Service %v; want the headless Service's only",
			wl.Headless.Spec.PublishNotReadyAddresses, wl.Service.Spec.PublishNotReadyAddresses)
	}
	// Rendered with the rest, after the Service.
	objs := wl.Objects()
	if len(objs) != 5 || objs[3] != any(h) {
		t.Errorf("objects: %d, headless at 3: %v", len(objs), objs[3] == any(h))
	}
	// A name that fits a Service but not with the suffix is refused, naming
	// the flag.
	p.Name = strings.Repeat("a", 60)
	if _, err := Render(p); err == nil || !strings.Contains(err.Error(), "--name") {
		t.Errorf("60-char name with headless: %v", err)
	}
}

// The gRPC port: the probe's --grpc-listen (and its connection age) and a
// container port named grpc, the one after the main port.
func TestRenderGRPCPort(t *testing.T) {
	p := testParams()
	p.Headless, p.GRPC, p.GRPCMaxConnectionAge = true, true, 1500*time.Millisecond
	c := container(mustRender(t, p).Deployment)
	if !slices.Contains(c.Command, "--grpc-listen=:8081") || !slices.Contains(c.Command, "--grpc-max-connection-age=1.5s") {
		t.Errorf("command %q lacks the gRPC port and its age", c.Command)
	}
	if len(c.Ports) != 2 || c.Ports[1].Name != "grpc" || c.Ports[1].ContainerPort != 8081 {
		t.Errorf("ports %+v, want http 8080 and grpc 8081", c.Ports)
	}
	p.GRPC = false
	if _, err := Render(p); err == nil || !strings.Contains(err.Error(), "--grpc-max-connection-age") {
		t.Errorf("an age without the gRPC port: %v", err)
	}
}
