// Package e2e runs epwindow verify, the command-line binary, against "team"
// Deployments built from the probe on the local cluster (Skipper as the
// ingress): one that exits at SIGTERM without a preStop, the same with the
// preStop that covers this cluster's window, one that ignores SIGTERM, one
// whose listener opens seconds after start without a readiness probe, and a
// GET at a low rate, which Skipper's retries of refused connections leave
// blind to the self-test's canary; and https, through a Go TLS front and
// through Traefik's TLS entry point (Traefik runs beside Skipper for it,
// routing only class traefik); and --watch, following rollouts restarted
// from outside (TestVerifyWatch). One cluster start for all.
package e2e
