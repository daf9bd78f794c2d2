// Package e2e shows on the local cluster (deploy/local, started once for the
// package) what package deploy's unit tests can only check offline: that the
// API server's own PodSecurity admission accepts the rendered probe pod in a
// namespace enforcing "restricted" and rejects a weakened one, and that the
// RBAC in deploy/rbac/ is exactly enough for MissingPermissions, asked of
// the real RBAC authorizer as the cluster's user without bindings. It has no
// code outside its tests.
package e2e
