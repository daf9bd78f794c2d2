// Package slow runs the ClusterIP ground truth of package clusterip on a
// local cluster whose kube-proxy syncs at most every 4 s: the
// cluster_last_routed delay must move out to that period.
package slow
