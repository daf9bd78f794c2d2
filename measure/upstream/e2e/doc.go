// Package e2e holds the upstream observers' tests on the real local cluster
// (bin/epwindow-local, built by make cluster): pod discovery and
// port-forwarding through the API server to a stand-in ingress-nginx
// controller pod, and the RBAC errors a user without permissions gets. The
// stand-in is this test binary itself, started as the pod's command with an
// environment variable that makes it serve ingress-nginx's status endpoint
// instead of running tests. It has no non-test code.
package e2e
