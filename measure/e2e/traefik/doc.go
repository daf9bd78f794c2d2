// Package traefik measures through the local cluster's real Traefik
// (v3.6.12, `epwindow-local up --ingress traefik`): its Kubernetes Ingress
// provider (terminating endpoints kept, fenced), its ingress-nginx provider
// (IngressClass nginx), and its Gateway provider (measure --route
// httproute); bad Gateway input; and the ground truth of
// providersThrottleDuration (--traefik-throttle) at 500 ms. The exported
// helpers are shared with package slow, which runs the ground truth at 3 s
// on a cluster of its own (the throttle is a flag of Traefik's process).
package traefik
