// Package probe is epwindow's probe: the HTTP server that runs as the
// measured pod's serving container and is the witness of the last connection
// and request that reached it.
//
// It answers every traffic request with 200, its pod name, and its own wall
// clock in the body (AppendTrafficBody; its control endpoints carry them as
// X-Epwindow-Pod and X-Epwindow-Time), and records accepts and requests in
// bounded memory (counters and first/last instants, per peer IP up to a cap;
// nothing grows per request or per connection). Control endpoints — /healthz,
// /timeline, /clock, /prestop, /release — are counted apart from traffic. On
// SIGTERM it keeps serving until released (POST /release) or until its hold
// expires, then drains, writes its Timeline as the termination message and
// returns.
//
// It does not measure anything outside itself: skew correction, stage
// assembly and the window are the tool's job (package measure). It imports no
// CLI package and decides no exit codes; cmd/epwindow wires flags and signals.
package probe
