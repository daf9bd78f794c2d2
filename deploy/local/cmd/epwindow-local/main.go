package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/epwindow/epwindow/deploy/local/kubeproxy"
	proxyapp "github.com/epwindow/epwindow/deploy/local/kubeproxy/app"
)

const usage = `usage: epwindow-local up --dir DIR [--nodes 2] [--batch-period 0s] [--ingress-poll 3s]
       [--proxy-mode nftables|iptables|none] [--proxy-min-sync-period 1s]
       [--max-endpoints-per-slice 100] [--ballast SERVICES[xENDPOINTS]] [--churn RATE]

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the node
agent, kube-proxy and Skipper; prints "READY kubeconfig=... ingress=... routes=..." on
stdout when the cluster is usable; SIGINT or SIGTERM tears it all down.
Component logs are written under DIR.
`

func main() {
	if handled := dispatchShim(); handled {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == kubeproxy.Arg {
		proxyapp.Main(os.Args[2:])
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "up" {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cfg, err := parseUp(os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "epwindow-local up: %v\n\n%s", err, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = up(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "epwindow-local up:", err)
		os.Exit(1)
	}
}
