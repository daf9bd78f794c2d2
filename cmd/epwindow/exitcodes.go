package main

// Exit codes, documented in README.md ("Exit codes"). Pipelines gate on them.
const (
	// exitOK: the command did what was asked.
	exitOK = 0
	// exitFailure: a run failed (cluster error, I/O, a trial could not run).
	exitFailure = 1
	// exitUsage: bad input — a flag, a combination of flags, or a file that
	// cannot be read; nothing was created.
	exitUsage = 2
	// exitThreshold: the measurement worked but breached a threshold
	// (--max-p99, --max-regression).
	exitThreshold = 3
	// exitCluster: the cluster cannot be used — kubeconfig missing or
	// garbled, unknown context, server unreachable; nothing was created.
	exitCluster = 4
	// exitForbidden: a permission measure needs is missing; nothing was
	// created.
	exitForbidden = 5
	// exitLowerBound: measured, but the recommendation is only a lower
	// bound: its order statistic fell on a trial cut at --hold.
	exitLowerBound = 6
	// exitBlind: verify's self-test saw no failure from its broken canary,
	// so the gate cannot fail on this cluster; the Deployment was not touched.
	exitBlind = 7
	// exitInterrupted: stopped by SIGINT/SIGTERM after cleaning up.
	exitInterrupted = 130
)
