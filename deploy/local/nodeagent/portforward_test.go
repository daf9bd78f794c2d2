package nodeagent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// forwardTo port-forwards a local port to podPort of the pod through the
// agent's kubelet API (as the API server's pods/portforward proxy would
// reach it) and returns the local port.
func forwardTo(t *testing.T, client *fake.Clientset, pod string, podPort int) int {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(context.Background(), "tn0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kport := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if kport == 0 {
		t.Fatal("node has no kubelet endpoint port")
	}
	cfg := &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", kport), TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(fmt.Sprintf("https://127.0.0.1:%d/portForward/default/%s", kport, pod))
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop) })
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", podPort)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("port-forward: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("port-forward not ready after 10s")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("forwarded ports %v, %v", ports, err)
	}
	return int(ports[0].Local)
}

func TestPortForwardReachesPodLoopback(t *testing.T) {
	client, _ := startTestAgent(t)
	pod := testPod("fwd-3", "ignore-term")
	pod.Spec.Containers[0].Lifecycle = nil
	pod.Spec.TerminationGracePeriodSeconds = new(int64)
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, client, pod.Name, 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	local := forwardTo(t, client, pod.Name, 8080)
	for i := 0; i < 3; i++ { // several connections over one forward
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/report", local))
		if err != nil {
			t.Fatalf("GET through port-forward: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"POD_NAME":"fwd-3"`) {
			t.Fatalf("port-forward answer %q is not the pod's", b)
		}
	}
}
