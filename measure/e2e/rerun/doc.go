// Package rerun checks epwindow's rerun workflow end to end on a real run:
// a local cluster is measured with bin/epwindow measure, bin/epwindow report
// must render the results file in every format, and bin/epwindow compare
// must read it — verdicts, JSON and the gates' exit codes. Whether compare
// finds a real change is a question of statistical power, tested on
// simulated runs in results (TestComparePowerOnSimulatedRuns). It has no
// non-test code, and it keeps no measured file: the run lives in a
// temporary directory and its reports go to the test log.
package rerun
