package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// What runs inside the cluster and needs what a real cluster gives it:
// epwindow's in-cluster schedule (a CronJob running `epwindow measure`)
// reaches the ingress controller through its Service, and keeps its
// history on a PersistentVolume.

// skipperService is the Service in front of Skipper, as an ingress
// controller's Service is on any cluster: kube-system/skipper-ingress, port
// 80, reaching Skipper (on 127.0.0.1) through a forwarder on the bridge.
const (
	skipperService   = "skipper-ingress"
	skipperPodPort   = 80
	volumesDir       = "volumes"
	volumeCapacity   = "10Gi"
	volumeNamePrefix = "local-"
)

// exposeSkipper makes Skipper reachable from pods at
// http://skipper-ingress.kube-system (its ClusterIP, through kube-proxy) and
// returns that URL by address, for clusters without DNS.
func exposeSkipper(ctx context.Context, c kubernetes.Interface, host netip.Addr, skipperURL string) (*hostForwarder, string, error) {
	fwd, err := forwardToHost(netip.AddrPortFrom(host, skipperPodPort), skipperURL)
	if err != nil {
		return nil, "", err
	}
	svc, err := c.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: skipperService, Namespace: metav1.NamespaceSystem},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "http", Port: skipperPodPort, Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{})
	if err == nil {
		name := "http"
		_, err = c.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Create(ctx, hostSlice(metav1.NamespaceSystem, skipperService, host,
			discoveryv1.EndpointPort{Name: &name, Port: ptr(int32(skipperPodPort)), Protocol: ptr(corev1.ProtocolTCP)}), metav1.CreateOptions{})
	}
	if err != nil {
		fwd.Close()
		return nil, "", fmt.Errorf("the %s Service: %w", skipperService, err)
	}
	return fwd, "http://" + netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), skipperPodPort).String(), nil
}

// createVolumes makes n PersistentVolumes for claims to bind to, as a
// local-path provisioner would: hostPath directories under DIR/volumes,
// world-writable (the node agent, like the kubelet, applies no fsGroup to
// hostPath), with no storage class, so that a claim without one binds to
// them. They go with the cluster: DIR/volumes is removed at teardown.
func createVolumes(ctx context.Context, c kubernetes.Interface, dir string, n int) error {
	var errs []error
	for i := range n {
		p := filepath.Join(dir, volumesDir, "pv-"+strconv.Itoa(i))
		if err := os.MkdirAll(p, 0o777); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o777); err != nil {
			return err
		}
		_, err := c.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: volumeNamePrefix + strconv.Itoa(i), Labels: map[string]string{"app.kubernetes.io/managed-by": "epwindow-local"}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(volumeCapacity)},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p}},
			},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("persistent volume %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
