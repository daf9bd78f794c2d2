// Package controlplane runs a Kubernetes control plane inside the calling
// process: embedded etcd, kube-apiserver, the kube-controller-manager
// controllers a Deployment rollout needs (EndpointSlice with its batch period,
// Deployment, ReplicaSet, garbage collector, namespace, service accounts) and
// kube-scheduler, all built from k8s.io/kubernetes and bound to 127.0.0.1.
//
// It writes fresh self-signed credentials and two kubeconfigs (admin and a
// user without RBAC bindings) under its directory, one log file per
// component, and removes nothing on Stop: the caller owns the directory. It
// does not run nodes; pods need a node agent to ever start.
package controlplane
