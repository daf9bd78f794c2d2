// Package testenv is what the local cluster's end-to-end tests share
// besides the launcher (internal/localcluster, which runs bin/epwindow-local
// up once per test package): it builds the probe Deployment, Service and
// Ingress, reads Skipper's route table, polls for conditions and lists what
// a teardown left behind. It imports only client-go, never the cluster's own
// packages, so the tests build in seconds.
package testenv
