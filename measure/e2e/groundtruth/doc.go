// Package groundtruth checks epwindow measure against injected ground truth:
// local clusters whose EndpointSlice controller batches updates by a known
// period, one cluster per period. It has no non-test code.
package groundtruth
