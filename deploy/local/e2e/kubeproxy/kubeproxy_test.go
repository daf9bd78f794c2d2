// Package kubeproxy tests the local cluster's kube-proxy: ClusterIPs route
// from the root namespace and from pods, to ready backends only, the
// kubernetes Service included, in both modes; teardown and a start after a
// crash leave none of kube-proxy's rules.
package kubeproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/deploy/local/e2e/testenv"
	"github.com/epwindow/epwindow/internal/localcluster"
)

// requests is how many requests each check sends through the ClusterIP.
// kube-proxy picks an endpoint at random per connection (nftables: numgen
// random mod n; iptables: statistic mode random), so with one unready
// backend wrongly included, 20 requests would reach it with probability
// 1 − 2⁻²⁰: a leak cannot hide.
const requests = 20

// TestClusterIP runs both modes, one cluster start each, then kills the
// iptables cluster without teardown and checks that the next start (in
// nftables mode) removes the crashed run's rules.
func TestClusterIP(t *testing.T) {
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			dir := t.TempDir()
			c, err := localcluster.Start(ctx, localcluster.Options{Nodes: 2, Dir: dir, ProxyMode: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			checkRouting(ctx, t, c.Client)
			if mode == "iptables" {
				// A crash: kube-proxy dies with its parent (Pdeathsig), its
				// rules stay until the next start removes them.
				c.Kill()
				c.Release()
				left, err := testenv.KubeProxyLeftovers(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(left) == 0 {
					t.Fatal("a killed cluster left no kube-proxy rules: the crash case tests nothing")
				}
				if c, err = localcluster.Start(ctx, localcluster.Options{Nodes: 2, Dir: dir}); err != nil {
					t.Fatalf("start after a crash: %v", err)
				}
				defer c.Release()
			}
			if err := c.Shutdown(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			left, err := testenv.Leftovers(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Errorf("teardown left behind:\n  %s", strings.Join(left, "\n  "))
			}
		})
	}
}

// checkRouting creates a Service with one ready backend on node-1 and one
// that never turns ready (its readiness probe asks a port nothing serves),
// then requests its ClusterIP from the root namespace and from a pod on
// node-0, and the kubernetes Service's ClusterIP from that pod.
func checkRouting(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ns, err := testenv.CreateNamespace(ctx, cs, "kubeproxy")
	if err != nil {
		t.Fatal(err)
	}
	backend := func(name, node string, readyPort int32) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "be"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
				Name: "probe", Image: "epwindow:local", Command: []string{"epwindow", "probe", fmt.Sprintf("--listen=:%d", testenv.ProbePort)},
				Env:   []corev1.EnvVar{{Name: "POD_NAME", Value: name}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: testenv.ProbePort}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromInt32(readyPort)}}, PeriodSeconds: 1},
			}}},
		}
	}
	create(ctx, t, func() error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, backend("ready", "node-1", testenv.ProbePort), metav1.CreateOptions{})
		return err
	})
	create(ctx, t, func() error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, backend("unready", "node-0", testenv.ProbePort+1), metav1.CreateOptions{})
		return err
	})
	svc, err := cs.CoreV1().Services(ns).Create(ctx, testenv.Service("be"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := svc.Spec.ClusterIP
	url := "http://" + ip + "/"

	// From the root namespace: kube-proxy DNATs in the output hook.
	hc := &http.Client{Timeout: 2 * time.Second}
	var last string
	err = testenv.Poll(ctx, "ClusterIP "+ip+" answers from the root namespace", 200*time.Millisecond, time.Minute, func() (bool, error) {
		resp, err := hc.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%v (last: %s)", err, last)
	}
	for i := 0; i < requests; i++ {
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatalf("request %d to %s from the root namespace: %v", i, url, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		if pod := testenv.ProbePod(body); pod != "ready" {
			t.Fatalf("request %d to %s answered by %q, want only the ready backend", i, url, pod)
		}
	}

	// From a pod on the other node: routed through its node's gateway,
	// DNATed in prerouting, forwarded over the bridge. Each connection runs
	// under coreutils' timeout, in its own bash: bash's /dev/tcp has no
	// timeout of its own, and a connect whose SYN or SYN-ACK is lost is
	// retried by the kernel for about two minutes (tcp_syn_retries 6) — as
	// when the bridge's MAC moved under the backend (nodeagent.bridgeMAC) —
	// so the pod would outlast the wait below and leave nothing to read.
	// With the limits, the pod ends, and its log says which step failed
	// (no "connected" line: the connect) and how (124: timed out).
	script := fmt.Sprintf(`timeout 10 bash -c 'exec 3<>/dev/tcp/10.96.0.1/443' && echo kubernetes-connected || echo "kubernetes: connect failed, exit $?"
for i in $(seq %d); do export i
  timeout 5 bash -c 'exec 4<>/dev/tcp/%s/80 && echo "request $i: connected" && printf "GET / HTTP/1.0\r\n\r\n" >&4 && grep -a "^pod=" <&4' || { echo "request $i: failed, exit $?"; exit 1; }
done`, requests, ip)
	// The script's own limits add up to 110 s at most; a minute more covers
	// the pod's start and its status reaching the API server.
	phase, out, err := testenv.RunScript(ctx, cs, ns, "node-0", script, 170*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if phase != corev1.PodSucceeded || !strings.Contains(out, "kubernetes-connected") {
		t.Errorf("client pod %s; want the kubernetes Service reachable and %d answers:\n%s", phase, requests, out)
	}
	if n := strings.Count(out, "pod=ready time="); n != requests || strings.Contains(out, "unready") {
		t.Errorf("from a pod: %d of %d answers from the ready backend:\n%s", n, requests, out)
	}
}

// create retries f while the namespace's default ServiceAccount, which pod
// admission needs, is still on its way.
func create(ctx context.Context, t *testing.T, f func() error) {
	t.Helper()
	var last error
	if err := testenv.Poll(ctx, "create", 100*time.Millisecond, 20*time.Second, func() (bool, error) {
		last = f()
		return last == nil, nil
	}); err != nil {
		t.Fatalf("%v: %v", err, last)
	}
}

// TestMain runs the tests in namespaces of their own, so that the clusters
// they start run beside other packages' (localcluster.Isolate).
func TestMain(m *testing.M) { localcluster.IsolatedMain(m) }
