// Package scale checks epwindow measure on the local cluster at production
// shape (epwindow-local up --max-endpoints-per-slice 5 --ballast 2000x5
// --churn 10): a 30-replica probe over 6 EndpointSlices, 2,000 other
// Services with their Ingresses and slices, and one ballast endpoint
// flipping ten times a second. One cluster and one measure run serve every
// test: the run's records are checked against the API server's own account
// of the slices (a watch of this package), against kube-proxy's own sync
// figures, and against the bounds the injected settings imply. It has no
// non-test code.
package scale
