// Package pods tests pods on the local cluster end to end (its tests start
// one cluster for the package): probe replicas Ready on pod addresses, in
// the EndpointSlice and behind Skipper; a deletion seen as a terminating
// endpoint, dropped by Skipper, with preStop before SIGTERM; and a container
// that ignores SIGTERM killed at the grace period.
package pods
