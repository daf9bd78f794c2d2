// Package dns tests the local cluster's DNS (up --dns) end to end, on one
// cluster: CoreDNS answers for the cluster domain through the kube-dns
// ClusterIP (kube-proxy's DNAT) over UDP and TCP, and a ClusterFirst pod's
// resolv.conf names it, with the kubelet's search path, so that the pod
// resolves Services by their short names through glibc, as any pod does.
package dns

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/deploy/local/e2e/testenv"
	"github.com/epwindow/epwindow/internal/localcluster"
)

func TestClusterDNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{Nodes: 2, Dir: t.TempDir(), DNS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if c.DNS != "10.96.0.10:53" || c.DNSDirect == "" {
		t.Fatalf("READY names dns=%q dns-direct=%q, want the kube-dns Service 10.96.0.10:53 and CoreDNS's address", c.DNS, c.DNSDirect)
	}
	cs := c.Client
	ns, err := testenv.CreateNamespace(ctx, cs, "dns")
	if err != nil {
		t.Fatal(err)
	}
	// A headless Service over one probe: its name resolves to the pod's
	// address once the pod is ready (CoreDNS answers ready endpoints only).
	dep := testenv.ProbeDeployment("web", 1, 5, time.Minute)
	retry(ctx, t, func() error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
		return err
	})
	svc := testenv.Service("web")
	svc.Spec.ClusterIP = corev1.ClusterIPNone
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var podIP string
	err = testenv.Poll(ctx, "the web pod ready", 200*time.Millisecond, 2*time.Minute, func() (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if testenv.PodReady(&pods.Items[i]) {
				podIP = pods.Items[i].Status.PodIP
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// From the root namespace, through the ClusterIP, over both
	// transports: the headless name (once CoreDNS's watch has the ready
	// endpoint) and the kubernetes Service.
	fqdn := "web." + ns + ".svc.cluster.local."
	for _, network := range []string{"udp", "tcp"} {
		r := resolver(network, c.DNS)
		err := testenv.Poll(ctx, fqdn+" over "+network, 200*time.Millisecond, 30*time.Second, func() (bool, error) {
			addrs, _ := lookup(ctx, r, fqdn)
			return slices.Equal(addrs, []string{podIP}), nil
		})
		if err != nil {
			addrs, lerr := lookup(ctx, r, fqdn)
			t.Fatalf("%v: last answer %v, %v; want [%s]", err, addrs, lerr, podIP)
		}
		if addrs, err := lookup(ctx, r, "kubernetes.default.svc.cluster.local."); err != nil || !slices.Equal(addrs, []string{"10.96.0.1"}) {
			t.Errorf("kubernetes.default over %s: %v, %v; want [10.96.0.1]", network, addrs, err)
		}
	}
	// Nothing outside the cluster domain is answered: CoreDNS has no
	// forward plugin, so no query leaves the machine.
	if addrs, err := lookup(ctx, resolver("udp", c.DNS), "example.com."); err == nil {
		t.Errorf("example.com resolved to %v: the cluster DNS forwards off the machine", addrs)
	}

	// From a ClusterFirst pod: its resolv.conf and glibc's resolution of
	// short names through the search path.
	script := `cat /etc/resolv.conf; echo ---
getent hosts web || echo "web: not resolved"
getent hosts kubernetes.default || echo "kubernetes.default: not resolved"`
	phase, out, err := testenv.RunScript(ctx, cs, ns, "node-0", "timeout 60 bash -c '"+script+"'", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if phase != corev1.PodSucceeded {
		t.Errorf("client pod %s", phase)
	}
	t.Logf("client pod:\n%s", out)
	conf, results, _ := strings.Cut(out, "---\n")
	for _, want := range []string{"nameserver 10.96.0.10\n", "search " + ns + ".svc.cluster.local svc.cluster.local cluster.local", "options ndots:5\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("the pod's resolv.conf lacks %q", want)
		}
	}
	if strings.Count(conf, "nameserver") != 1 {
		t.Errorf("the pod's resolv.conf names other nameservers than the cluster's")
	}
	if !strings.Contains(results, podIP+" ") || !strings.Contains(results, "10.96.0.1 ") {
		t.Errorf("the pod resolved web and kubernetes.default to\n%s\nwant %s and 10.96.0.1", results, podIP)
	}
}

func resolver(network, addr string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

func lookup(ctx context.Context, r *net.Resolver, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, name)
	slices.Sort(addrs)
	return addrs, err
}

// retry runs create until the namespace's default ServiceAccount, which
// pod admission needs, exists.
func retry(ctx context.Context, t *testing.T, create func() error) {
	t.Helper()
	var last error
	err := testenv.Poll(ctx, "create", 200*time.Millisecond, 30*time.Second, func() (bool, error) {
		last = create()
		if last != nil && (apierrors.IsForbidden(last) || apierrors.IsServerTimeout(last)) {
			return false, nil
		}
		return true, last
	})
	if err != nil {
		t.Fatal(fmt.Errorf("%w (last: %v)", err, last))
	}
}

// TestMain runs the tests in namespaces of their own, so that the clusters
// they start run beside other packages' (localcluster.Isolate).
func TestMain(m *testing.M) { localcluster.IsolatedMain(m) }
