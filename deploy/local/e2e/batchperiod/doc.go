// Package batchperiod tests that `up --batch-period` reaches the
// EndpointSlice controller: with a 1 s batch period a pod's deletion shows
// in its Service's slice about 1 s later, the injected ground truth that
// epwindow's measurement is checked against.
package batchperiod
