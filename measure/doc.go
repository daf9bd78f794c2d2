// Package measure runs epwindow's trials: it owns a namespace with the probe
// workload (behind an Ingress, or an HTTPRoute on an existing Gateway whose
// controller it waits for), drives load through the ingress, deletes one
// probe pod at a time, and stamps every stage of the propagation window on
// the tool's clock as the pod and EndpointSlice watches, the upstream
// observers and the probe report it. It writes one results.Record per trial
// and never touches objects it did not create. It does not render reports
// (package results does) or print to a terminal (cmd/epwindow does).
package measure
