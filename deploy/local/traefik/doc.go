// Package traefik runs Traefik (bin/traefik, built unmodified from the module
// proxy by deploy/local/traefik-build) as the local cluster's second data
// plane, out of cluster like Skipper: its Kubernetes Ingress, Gateway API and
// ingress-nginx-compatible providers read the local API server, its proxy and
// API listen on loopback only.
package traefik
