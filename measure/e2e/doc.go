// Package e2e holds epwindow measure's end-to-end tests: they start the real
// local cluster (bin/epwindow-local, built by make cluster) once in TestMain
// and run measure.Run against it through Skipper. It has no non-test code.
package e2e
