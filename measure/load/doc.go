// Package load drives steady, open-loop HTTP traffic through the ingress under
// test and reads what comes back: which pod served each response (the probe's
// X-Epwindow-Pod header), when traffic to a pod was first and last seen, what
// failed and when (refused, reset, timeout, eof, status_502, ...), and each
// probe's clock offset from the tool's, estimated from the probe time carried
// in X-Epwindow-Time (DESIGN.md "Clock skew").
//
// Requests go out on a fixed schedule (ConstantPacer): a slow or failing
// response never delays the next request, and when the in-flight cap is
// reached a request is counted as dropped instead of being queued. Memory is
// bounded: per-pod aggregates, a fixed ring of failure events and a
// fixed-size latency histogram; nothing grows per request.
//
// It does not know about Kubernetes: mapping pods to nodes, deciding which
// failures fall inside a trial's window and correcting pod-clock stages are
// the caller's (package measure) business. It speaks HTTP/1.1 only (one
// request per connection at a time, so a new connection per request means a
// new accept by whoever is routed to), does not retry and does not follow
// redirects; every response is reported as it arrived.
//
// RunRunner is the same generator as an unattended runner in a pod (epwindow
// load, measure --in-cluster-load): it sends to one URL only, at a rate capped
// by MaxRate, stops by itself at its deadline, and serves its statistics and
// its clock as JSON (StatsHandler) for the tool to read through the API
// server's pod proxy.
package load
