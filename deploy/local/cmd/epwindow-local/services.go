package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// apiPodPort is the port the API server is reachable on from pods, at the
// bridge's host address: the target of the kubernetes Service's slice.
const apiPodPort = 6443

// hostForwarder makes a process listening on 127.0.0.1 only reachable from
// pods at an address of the bridge, by copying bytes to it: for the API
// server (TLS runs end to end, and the serving certificate names 10.96.0.1,
// the kubernetes Service's ClusterIP) and for Skipper (see
// exposeSkipper). The address exists only on the pod bridge, so nothing off
// the machine can reach it.
type hostForwarder struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

func forwardAPIServer(host netip.Addr, apiURL string) (*hostForwarder, error) {
	return forwardToHost(netip.AddrPortFrom(host, apiPodPort), apiURL)
}

// forwardToHost listens at addr and forwards every connection to the host
// and port of targetURL.
func forwardToHost(addr netip.AddrPort, targetURL string) (*hostForwarder, error) {
	u, err := url.Parse(targetURL)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("listen for pods on %s: %w", addr, err)
	}
	f := &hostForwarder{ln: ln, open: map[net.Conn]bool{}}
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Go(func() { f.pipe(c, u.Host) })
		}
	})
	return f, nil
}

func (f *hostForwarder) track(c net.Conn, on bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open == nil {
		return false
	}
	if on {
		f.open[c] = true
	} else {
		delete(f.open, c)
	}
	return true
}

func (f *hostForwarder) pipe(c net.Conn, target string) {
	defer c.Close()
	if !f.track(c, true) {
		return
	}
	defer f.track(c, false)
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// Close stops accepting, ends every open connection and waits for them.
func (f *hostForwarder) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	for c := range f.open {
		c.Close()
	}
	f.open = nil
	f.mu.Unlock()
	f.wg.Wait()
	return err
}

// createKubernetesSlice gives the kubernetes Service (made by the API
// server, with no endpoints here: its reconciler is off because its address
// is loopback, which EndpointSlices reject) the forwarder's address, so that
// kubernetes.default.svc routes from pods through kube-proxy as on any
// cluster. The Service has no selector; the EndpointSlice controller leaves
// a slice it does not manage alone.
func createKubernetesSlice(ctx context.Context, c kubernetes.Interface, host netip.Addr) error {
	// The API server's bootstrap controller creates the Service soon
	// after it starts serving.
	var svc *corev1.Service
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if svc, err = c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the kubernetes Service: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var portName string
	for _, p := range svc.Spec.Ports {
		if p.Port == 443 {
			portName = p.Name
		}
	}
	if portName == "" {
		return errors.New("the kubernetes Service has no port 443")
	}
	slice := hostSlice(metav1.NamespaceDefault, "kubernetes", host,
		discoveryv1.EndpointPort{Name: &portName, Port: ptr(int32(apiPodPort)), Protocol: ptr(corev1.ProtocolTCP)})
	_, err = c.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the kubernetes Service's EndpointSlice: %w", err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// hostSlice is the EndpointSlice of the selector-less Service ns/service
// that sends it to a process on the machine: one ready endpoint, host, on
// ports, managed by epwindow-local (no controller owns it).
func hostSlice(ns, service string, host netip.Addr, ports ...discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	ready := true
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: service,
			discoveryv1.LabelManagedBy:   "epwindow-local",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       ports,
	}
}
