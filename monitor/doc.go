// Package monitor exposes a history of scheduled runs (results.Drift) as
// Prometheus metrics: the stages of the newest runs as histograms, the
// recommendation and its bound, the drift verdict and what it rests on.
// Names follow Prometheus conventions: the epwindow_ prefix, base units
// (_seconds), no per-pod or per-trial labels. It serves nothing itself:
// cmd/epwindow registers its Collector on an HTTP handler.
package monitor
