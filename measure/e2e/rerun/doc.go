// Package rerun checks epwindow's rerun workflow end to end on real runs:
// two local clusters that differ only in Skipper's poll interval
// (--ingress-poll 1s, then 3s) are measured with bin/epwindow measure, and
// bin/epwindow compare must call the upstream stage and the stages that
// follow it worse, the EndpointSlice and node stages before it the same,
// and exit 3 on --max-regression; bin/epwindow report must render the real
// results file in every format. It has no non-test code, and it keeps no
// measured file: the runs live in a temporary directory and their reports
// go to the test log.
package rerun
