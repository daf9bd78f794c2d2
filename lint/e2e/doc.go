// Package e2e checks lint and policy on the local cluster's real API
// server: the generated ValidatingAdmissionPolicy refuses (Deny) or warns
// about (Warn) a Deployment whose grace period is too short, admits a
// compliant one, and `epwindow lint --cluster` finds the bad live object;
// for each rule the policy claims, an object breaking only it is refused
// with its message and its fixed twin admitted; and every form in
// forms_test.go (sleeps, shell options, annotations near the number's
// boundary) gets the same verdict from lint and from the API server.
package e2e
