// Package app runs kube-proxy itself, in the process epwindow-local starts
// with kubeproxy.Arg. It is apart from package kubeproxy so that the
// launcher's tests do not build k8s.io/kubernetes.
package app

import (
	"fmt"
	"os"

	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
)

// Main runs kube-proxy's own command (cmd/kube-proxy/proxy.go does the
// same through component-base's cli.Run) with args and exits with its
// status; SIGTERM ends the process with the default action, and the
// launcher removes the rules afterwards.
func Main(args []string) {
	cmd := proxyapp.NewProxyCommand()
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kube-proxy:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
