// Package localcluster starts the local cluster (bin/epwindow-local up, built
// by `make cluster`) for tests: once per package, from TestMain, it runs the
// binary, waits for its READY line and hands out the kubeconfig, a
// *rest.Config and the ingress and route-table URLs; Stop tears it down.
//
// It only runs and stops the binary; it never builds it, and it does not
// import the cluster's own code (k8s.io/kubernetes stays out of this module).
package localcluster
