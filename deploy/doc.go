// Package deploy holds the probe workload's manifests — a kustomize base
// (Namespace, Deployment, Service, Ingress), one overlay per ingress
// controller, and deploy/httproute (the base with a Gateway API HTTPRoute
// instead of the Ingress, for --route httproute) — embedded in the binary,
// and renders them for one run: Render builds base + overlay with kustomize
// in memory, decodes the result into typed objects (the HTTPRoute, which has
// no Go types here, into an unstructured one) and sets the run's values
// (namespace, names, replicas, image, class or Gateway, host, hold, grace,
// preStop, probe flags) on their fields. The shape
// of every object (security context, probes, hook, annotations) lives only in
// the YAML; nothing is built from strings.
//
// For a team's own Deployment (measure --target) it builds the `epwindow
// sidecar` witness as a native sidecar from deploy/sidecar/container.yaml,
// and the strategic-merge patches that add and remove it (SidecarPatch,
// SidecarRemovePatch) or the kustomize Component that keeps it
// (SidecarComponent).
//
// It also states the permissions `epwindow measure` needs (PermissionsFor,
// the same rules as deploy/rbac/; TargetPermissions for measure --target,
// deploy/rbac/target) and checks them with
// SelfSubjectAccessReviews before anything is created (MissingPermissions).
//
// It does not talk to a cluster otherwise: applying, watching and deleting
// the workload is package measure's job. deploy/local/ is a separate Go module
// (the local cluster) and not part of this package.
package deploy
