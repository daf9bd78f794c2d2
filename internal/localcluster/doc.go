// Package localcluster starts and stops the local cluster
// (bin/epwindow-local up, built by `make cluster`) for tests, in both Go
// modules that test against it: the tool's and deploy/local's. It runs the
// binary, waits for its READY line and hands out the kubeconfig, a
// *rest.Config, a client and the ingress and route-table URLs; Stop tears
// the cluster down. Main is the TestMain of a package that shares one
// cluster among its tests.
//
// It is a module of its own so that both modules can use it: it only runs
// and stops the binary, never builds it, and never imports the cluster's
// own code (k8s.io/kubernetes stays out of the tool's module).
package localcluster
