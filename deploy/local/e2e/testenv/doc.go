// Package testenv is what the local cluster's end-to-end tests share: it
// runs bin/epwindow-local up (built by `make cluster`) once per test package,
// builds the probe Deployment, Service and Ingress, reads Skipper's route
// table, and polls for conditions. It imports only client-go, never the
// cluster's own packages, so the tests build in seconds.
package testenv
