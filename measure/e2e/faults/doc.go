// Package faults shows on the real local cluster (bin/epwindow-local, built
// by make cluster, started once in TestMain) how epwindow measure behaves
// when things go wrong, and that it is safe to point at a cluster that
// matters: SIGINT at random moments of a run leaves no namespace, no probe
// pod and no undecodable results file; a frozen control plane or a blind
// upstream observer marks the affected trials invalid (with the reason)
// while the run goes on; pods outside the run's namespace, even ones with
// the probe's labels, are never touched; and Pod Security "restricted",
// which the run's namespace enforces, really is enforced by the local API
// server. It has no non-test code.
package faults
