// Package clusterip tests the ClusterIP path on the local cluster: measure
// with in-cluster runners (--in-cluster-load) against a real kube-proxy
// (nftables) whose --min-sync-period the test sets, as ground truth for
// cluster_last_routed; the runners' and the probe's view of the same path
// agreeing across two pods' clocks; and Ctrl-C leaving no runner pod. The
// exported helpers are shared with package slow, which runs the ground truth
// on a cluster with a longer sync period (one local cluster per package).
package clusterip
