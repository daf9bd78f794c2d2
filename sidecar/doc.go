// Package sidecar is epwindow's witness inside a team's own pod: a process
// beside the app, in the pod's network namespace and without privileges, that
// polls the namespace's TCP sockets and records, per peer address, the last
// connection it saw open on the app's port(s), the last data received on
// them, and when the app's listener went away.
//
// It reads sockets through NETLINK_SOCK_DIAG (inet_diag) with tcp_info, by
// github.com/vishvananda/netlink, which any process in the namespace may do,
// and /proc/net/snmp's PassiveOpens, to count the connections that opened and
// closed between two reads (unseen_connections). It sees connections and
// bytes, not requests: a request on a kept-alive connection is "data
// received", and what the app does with it is not known.
//
// The pure core is Tracker (one dump in, the timeline updated); Sidecar adds
// the clock, the kernel reads and the HTTP server (GET /timeline, /clock,
// /healthz, in the probe's shapes). It does not assemble stages or correct
// skew (package measure does), and it imports no CLI package: cmd/epwindow
// wires flags and signals.
package sidecar
