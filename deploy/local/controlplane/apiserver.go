package controlplane

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// ServiceClusterIPRange is the Services' address range. The node agent
// routes it onto the pod bridge and kube-proxy rewrites it (epwindow-local
// up --proxy-mode); with --proxy-mode none nothing routes it.
const ServiceClusterIPRange = "10.96.0.0/16"

// apiserverArgs are kube-apiserver's flags, as on a kubeadm control plane but
// lean: loopback only, no endpoint reconciler (the only apiserver is on
// 127.0.0.1, which EndpointSlices reject), no priority-and-fairness.
func apiserverArgs(p *PKI, etcdURL string) []string {
	return []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--etcd-servers=" + etcdURL,
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + p.ServingCertFile,
		"--tls-private-key-file=" + p.ServingKeyFile,
		"--client-ca-file=" + p.CAFile,
		"--token-auth-file=" + p.TokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.ServiceAccountPubFile,
		"--service-account-signing-key-file=" + p.ServiceAccountKeyFile,
		// The apiserver dials the node agent's kubelet API (port-forward,
		// logs) at the Node's InternalIP and kubelet port. Without
		// --kubelet-certificate-authority it does not verify the kubelet's
		// serving certificate (pkg/kubelet/client/kubelet_client.go,
		// transportConfig), as the node agent serves a self-signed one.
		"--kubelet-client-certificate=" + p.KubeletClientCertFile,
		"--kubelet-client-key=" + p.KubeletClientKeyFile,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		// TaintNodesByCondition taints every new Node not-ready; only the
		// node-lifecycle controller (left out: the node agent keeps Nodes
		// Ready) would lift it, so pods would never schedule
		// (plugin/pkg/admission/nodetaint/admission.go).
		"--disable-admission-plugins=TaintNodesByCondition",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--allow-privileged=true",
	}
}

// runAPIServer builds kube-apiserver from its own option structs (as its
// cobra command does, cmd/kube-apiserver/app/server.go, minus the signal
// handler) and serves on ln until ctx ends. It returns once the server chain
// is built; serving errors arrive on the returned channel.
func runAPIServer(ctx context.Context, ln net.Listener, args []string) (*rest.Config, <-chan error, error) {
	s := apiserveroptions.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver flags: %w", err)
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver feature gates: %w", err)
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	s.SecureServing.ExternalAddress = ln.Addr().(*net.TCPAddr).IP

	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("complete kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, nil, fmt.Errorf("kube-apiserver options: %w", utilerrors.NewAggregate(errs))
	}
	config, err := apiserverapp.NewConfig(completed)
	if err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver config: %w", err)
	}
	cc, err := config.Complete()
	if err != nil {
		return nil, nil, fmt.Errorf("complete kube-apiserver config: %w", err)
	}
	server, err := apiserverapp.CreateServerChain(cc)
	if err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver server chain: %w", err)
	}
	loopback := rest.CopyConfig(server.GenericAPIServer.LoopbackClientConfig)
	errc := make(chan error, 1)
	go func() {
		prepared, err := server.PrepareRun()
		if err == nil {
			err = prepared.Run(ctx)
		}
		errc <- err
	}()
	return loopback, errc, nil
}

// listenLoopback listens on 127.0.0.1 on a port the kernel picks; the
// listener is handed to the server, so no other process can take the port
// between choosing and binding it.
func listenLoopback() (net.Listener, int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0, fmt.Errorf("listen on 127.0.0.1: %w", err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	n, _ := strconv.Atoi(port)
	return ln, n, nil
}
