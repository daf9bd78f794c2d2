package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/deploy/local/haproxy"
	"github.com/epwindow/epwindow/deploy/local/nodeagent"
)

// The namespace and headless Service HAProxy resolves (up --haproxy): a
// fixed name its configuration holds before any run, over every probe pod
// in that namespace. measure runs there with --namespace, and times the
// same name with --dns-name.
const (
	haproxyNamespace = "epwindow-dns"
	haproxyService   = "dnsprobe"
	// The probe pods' labels and port (deploy.LabelName, deploy.NameValue
	// and deploy.DefaultPort of the epwindow module, which this module
	// does not import).
	probeLabel, probeName = "app.kubernetes.io/name", "epwindow-probe"
	probePort             = 8080
	// haproxySlots is the server-template's size: a probe Deployment's
	// replicas and a rollout's surge with room to spare.
	haproxySlots = 10
)

// haproxyName is the headless Service's fully qualified name.
func haproxyName() string {
	return haproxyService + "." + haproxyNamespace + ".svc." + nodeagent.DefaultClusterDomain
}

// startHAProxy creates the namespace and headless Service HAProxy resolves
// and runs HAProxy asking CoreDNS (dns) for it every cfg.HAProxyResolve.
func startHAProxy(ctx context.Context, cfg upConfig, c kubernetes.Interface, dns netip.AddrPort) (*haproxy.HAProxy, error) {
	if err := createHAProxyService(ctx, c); err != nil {
		return nil, err
	}
	h, err := haproxy.Start(ctx, haproxy.Config{
		Nameserver: dns, Name: haproxyName(), Port: probePort, Slots: haproxySlots,
		ResolveEvery: cfg.HAProxyResolve, Dir: cfg.Dir, LogFile: filepath.Join(cfg.Dir, "haproxy.log"),
	})
	if err != nil {
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	return h, nil
}

// createHAProxyService makes haproxyNamespace and in it the headless
// Service haproxyService over the probe pods.
func createHAProxyService(ctx context.Context, c kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: haproxyNamespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", haproxyNamespace, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: haproxyService, Namespace: haproxyNamespace},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{probeLabel: probeName},
			Ports:     []corev1.ServicePort{{Name: "http", Port: probePort}},
		},
	}
	if _, err := c.CoreV1().Services(haproxyNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the headless Service %s/%s: %w", haproxyNamespace, haproxyService, err)
	}
	return nil
}
