// Package dns tests the DNS path on the local cluster: measure --dns
// against real CoreDNS (up --dns, built unmodified from its release),
// whose answers for the probe's headless Service must drop a deleted pod's
// address when the EndpointSlice turns it not ready, and whose TTL the
// results header must report as CoreDNS answered it.
package dns
