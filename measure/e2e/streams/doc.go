// Package streams measures long-lived connections on the local cluster
// (measure --streams, issue 21): WebSocket streams through Skipper
// (-experimental-upgrade) and gRPC streams through Traefik (h2c to the
// pods), with the probe ending them as --stream-drain says, and checks how
// they end and the reconnect herd that follows. One cluster (Skipper and
// Traefik, kube-proxy in nftables mode) serves every test.
package streams
