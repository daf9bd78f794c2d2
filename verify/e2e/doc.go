// Package e2e runs epwindow verify, the command-line binary, against "team"
// Deployments built from the probe on the local cluster (Skipper as the
// ingress): one that exits at SIGTERM without a preStop, the same with the
// preStop that covers this cluster's window, one that ignores SIGTERM, one
// whose listener opens seconds after start without a readiness probe. One
// cluster start for all. The self-test's blindness is covered by the verify
// package's unit tests only: on the local cluster a GET at 10 req/s still saw
// timeouts (the exited pod's address answers nothing, so Skipper's retry of a
// refused connection does not hide them), and the blind case is open work.
package e2e
