// Package upstream reads ingress controllers' and load balancers' own live
// views of their upstreams (an Observer per controller family) and turns a
// series of polls into upstream_last_present / upstream_removed instants for
// one address. It does not infer anything from EndpointSlices.
package upstream
