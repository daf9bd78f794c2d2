// Package lifecycle tests the local cluster's start and teardown: time to
// READY, and that SIGTERM (and a start after a crash) leaves no process,
// network namespace, link, route or state file behind.
package lifecycle
