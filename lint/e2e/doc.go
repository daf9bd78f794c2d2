// Package e2e checks lint and policy on the local cluster's real API
// server: the generated ValidatingAdmissionPolicy refuses (Deny) or warns
// about (Warn) a Deployment whose grace period is too short, admits a
// compliant one, and `epwindow lint --cluster` finds the bad live object.
package e2e
