// Command epwindow-local runs the local cluster: a Kubernetes control plane,
// a node agent that runs pods as processes in network namespaces, and
// Zalando Skipper as ingress, all on this machine.
//
//	epwindow-local up --dir /tmp/x [--nodes 2] [--batch-period 0s] [--ingress-poll 3s] [--proxy-mode nftables]
//
// prints one line when the cluster is usable:
//
//	READY kubeconfig=/tmp/x/kubeconfig ingress=http://127.0.0.1:PORT routes=http://127.0.0.1:PORT/routes ingress-in-cluster=http://10.96.X.Y:80 …
//
// (ingress-in-cluster is Skipper as pods reach it, through its Service
// kube-system/skipper-ingress). It also creates --volumes hostPath
// PersistentVolumes under DIR/volumes for claims to bind to.
//
// and tears everything down on SIGINT or SIGTERM.
package main
