// Package testenv is what the local cluster's end-to-end tests share
// besides the launcher (internal/localcluster, which runs bin/epwindow-local
// up once per test package): it builds the probe Deployment, Service and
// Ingress, reads Skipper's route table, polls for conditions and lists what
// a teardown left behind. Besides client-go it imports only the cluster's
// light packages (kubeproxy, for its marker's name), never those that import
// k8s.io/kubernetes, so the tests build in seconds.
package testenv
