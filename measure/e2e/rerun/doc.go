// Package rerun checks epwindow's rerun workflow end to end on real runs:
// a local cluster whose Skipper polls every 1 s, then one polling every
// 4 s, are measured with bin/epwindow measure; bin/epwindow report must
// render each results file in every format, and bin/epwindow compare must
// read them — verdicts, JSON and the gates' exit codes — and call the
// slower poll's window worse. compare's false-alarm rate and its power
// against changes real runs cannot be made to show on demand (a slow mode
// in 10% of deletions) are tested on simulated runs in results. It has no
// non-test code, and it keeps no measured file: the runs live in a
// temporary directory and their reports go to the test log.
package rerun
