// Package skipper runs Zalando Skipper (bin/skipper, built unmodified by
// `make cluster` from the version pinned in deploy/local/skipper-build) as a
// child process: the local cluster's ingress controller, out of cluster,
// polling the local API server for Ingresses of class "skipper" and
// class-less ones, with EndpointSlices as the source of backends.
//
// Every listener is bound to 127.0.0.1. It does not build Skipper, manage
// its routes, or restart it if it dies; the caller watches Done.
package skipper
