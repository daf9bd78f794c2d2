// Package lint holds workload manifests to a measured propagation window:
// it reads Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs,
// CronJobs and bare Pods (from YAML streams, kustomize directories or live
// objects), checks each pod template against a Target (the preStop the
// window needs, the longest request, the headroom) with the rules in Rules,
// and renders the findings as text, JSON or SARIF 2.1.0. Policy builds a
// ValidatingAdmissionPolicy and its binding that enforce, in CEL, the rules
// a single object's admission can check.
//
// It reads and renders; it never talks to a cluster (the caller lists live
// objects and hands them over as Objects) and never writes a manifest.
package lint
