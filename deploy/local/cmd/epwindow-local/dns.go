package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/deploy/local/controlplane"
	"github.com/epwindow/epwindow/deploy/local/coredns"
	"github.com/epwindow/epwindow/deploy/local/nodeagent"
)

// kubeDNSAddr is the kube-dns Service's ClusterIP: the tenth address of
// the Service range, as kubeadm picks it (--service-cidr's .10), and the
// node agent's --cluster-dns.
var kubeDNSAddr = netip.MustParseAddr("10.96.0.10")

// clusterDNS is what the node agent writes into ClusterFirst pods'
// resolv.conf: the kube-dns address with --dns, none without.
func clusterDNS(cfg upConfig) []netip.Addr {
	if !cfg.DNS {
		return nil
	}
	return []netip.Addr{kubeDNSAddr}
}

// startDNS runs CoreDNS on the machine's pod-network address and makes the
// kube-dns Service in kube-system route to it: selector-less, ClusterIP
// kubeDNSAddr, ports 53/UDP, 53/TCP and 9153/TCP as kubeadm's, with one
// EndpointSlice naming host (kube-proxy then DNATs pods' queries to it,
// as it does on any cluster). CoreDNS reads the API server as user
// "coredns", bound to the ClusterRole system:coredns with kubeadm's rules.
func startDNS(ctx context.Context, cfg upConfig, cp *controlplane.ControlPlane, host netip.Addr) (*coredns.CoreDNS, error) {
	if err := createCoreDNSRBAC(ctx, cp.Client); err != nil {
		return nil, err
	}
	if err := createKubeDNSService(ctx, cp.Client, host); err != nil {
		return nil, err
	}
	dns, err := coredns.Start(ctx, coredns.Config{
		Binary:       filepath.Join(cfg.BinDir, "coredns"),
		Kubeconfig:   cp.CoreDNSKubeconfig,
		Listen:       host,
		Domain:       nodeagent.DefaultClusterDomain,
		TTL:          cfg.DNSTTL,
		Cache:        cfg.DNSCache,
		CacheCluster: cfg.DNSCacheCluster,
		Dir:          cfg.Dir,
		LogFile:      filepath.Join(cfg.Dir, "coredns.log"),
	})
	if err != nil {
		return nil, fmt.Errorf("coredns: %w", err)
	}
	return dns, nil
}

// createCoreDNSRBAC grants user "coredns" what kubeadm's CoreDNS
// ClusterRole grants its ServiceAccount
// (cmd/kubeadm/app/phases/addons/dns/manifests.go, CoreDNSClusterRole).
func createCoreDNSRBAC(ctx context.Context, c kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
			{APIGroups: []string{discoveryv1.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole system:coredns: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "coredns"}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding system:coredns: %w", err)
	}
	return nil
}

// createKubeDNSService makes kube-system/kube-dns and its EndpointSlice.
func createKubeDNSService(ctx context.Context, c kubernetes.Interface, host netip.Addr) error {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{
			"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS",
		}},
		Spec: corev1.ServiceSpec{
			ClusterIP: kubeDNSAddr.String(),
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: coredns.Port, Protocol: udp},
				{Name: "dns-tcp", Port: coredns.Port, Protocol: tcp},
			},
		},
	}
	if _, err := c.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the kube-dns Service: %w", err)
	}
	slice := hostSlice(metav1.NamespaceSystem, "kube-dns", host,
		discoveryv1.EndpointPort{Name: ptr("dns"), Port: ptr(int32(coredns.Port)), Protocol: &udp},
		discoveryv1.EndpointPort{Name: ptr("dns-tcp"), Port: ptr(int32(coredns.Port)), Protocol: &tcp})
	if _, err := c.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the kube-dns Service's EndpointSlice: %w", err)
	}
	return nil
}
