// Package results holds what a measurement produces and everything that can
// be computed from it without a cluster: the trial record and the run's
// header (the results file's contract), the streaming JSON-lines and CSV
// encoders and the format-detecting decoder (every schema version so far),
// coded trial reasons with per-stage validity and censoring at the hold,
// per-stage percentiles and stage-to-stage deltas with distribution-free
// order-statistic upper confidence bounds, the preStop /
// terminationGracePeriodSeconds recommendation built on such a bound, the
// reporters (text, markdown, json, csv, perfdata, plot), and the comparison
// of two runs (seeded bootstrap, Bonferroni over the tests made) with
// thresholds that gate a pipeline.
//
// It does not measure anything, talk to a cluster, print to a terminal or
// decide exit codes: every function takes an io.Writer or returns an error,
// and cmd/epwindow decides what a breach means for the process.
package results
