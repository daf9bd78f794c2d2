// Package verify is the rollout-under-load gate for a team's own Deployment
// (epwindow verify): it drives steady load through the ingress, restarts the
// Deployment N times (or follows rollouts started elsewhere), and reports per
// rollout the responses by outcome, each failure attributed to the shutdown
// or the startup side of the pod it most likely hit, the terminated pods'
// exit codes, the rollout's duration and, with a check port, whether each
// terminating pod still answered on its own port after its address left the
// EndpointSlices, and, with --sidecar, each replaced pod's window as the
// epwindow sidecar the Deployment keeps measured it (information beside the
// failures: the verdict does not read it). Before touching the Deployment
// it runs the same load
// against a broken canary of its own (the self-test), which must fail: a
// gate that has never failed is no evidence.
//
// It changes nothing on the team's Deployment but the restart annotation
// (kubectl.kubernetes.io/restartedAt, as kubectl rollout restart sets it),
// and creates and removes only the self-test's own namespace. It prints
// nothing and decides no exit codes: Run returns a Report, and the
// renderers (Text, JSON, Markdown, JUnit) write it to an io.Writer.
package verify
