package main

import (
	"fmt"
	"io"
	"time"

	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// reasonFlags names, per reason code, the flag that changes what caused it.
// The results file never names a flag (it outlives the command line); the
// CLI adds these hints when it prints.
var reasonFlags = map[string]string{
	results.ReasonSkewBound:      "--" + measure.FlagMaxSkew + " bounds the clock-skew uncertainty a trial may carry; a lower --" + measure.FlagRate + " or a less loaded ingress tightens the estimate",
	results.ReasonObserverBlind:  "--" + flagObserverInterval + " sets how often the observer polls; --" + measure.FlagStopOnBlind + " stops a run instead",
	results.ReasonSkewMissing:    "the probe served no load through --" + measure.FlagURL + " and its /clock could not be read",
	results.ReasonUpstreamListed: "a controller still listed the pod when --" + measure.FlagHold + " ended the trial",
	results.ReasonStreamsLogFull: "a stream holder logged more events than it keeps: fewer --" + measure.FlagStreams + " or --" + measure.FlagTrials + " a run",
}

// printHints writes the hints of s to w, each behind "epwindow CMD: " and
// wrapped to width columns (<= 0: no limit), as the report above them is.
func printHints(w io.Writer, cmd string, width int, s *results.Summary) {
	for _, h := range hints(s) {
		l := "epwindow " + cmd + ": " + h
		if width > 0 {
			l = results.FitLines(l, width)
		}
		fmt.Fprintln(w, l)
	}
}

// hints are the lines the CLI prints after a report: the flag behind each
// reason the run carried, and what to rerun with when the recommendation
// is only a floor or the trials were too few for the quantile asked.
func hints(s *results.Summary) []string {
	d := s.Doc()
	var out []string
	if r := d.Recommendation; r != nil {
		if r.LowerBound() {
			hold := holdOf(s.Header)
			out = append(out, fmt.Sprintf("the recommendation is only a lower bound (preStop ≥ %ds: %s): rerun with --%s %s",
				r.PreStopSeconds, r.FloorCause(), measure.FlagHold, longerHold(hold)))
		}
		if !r.Bound.Enough() {
			out = append(out, fmt.Sprintf("%s: for %s of deletions at %s confidence rerun with --%s %d",
				r.Bound.Claim(), trimPct(r.Bound.Quantile), trimPct(r.Bound.Confidence), measure.FlagTrials, r.Bound.Need))
		}
	}
	for _, code := range d.InvalidSorted() {
		if f, ok := reasonFlags[code]; ok {
			out = append(out, fmt.Sprintf("%s ×%d: %s", code, d.InvalidReasons[code], f))
		}
	}
	return out
}

// holdOf is the run's hold: the header's, else measure's default.
func holdOf(h *results.Header) time.Duration {
	if h != nil && h.HoldNS > 0 {
		return time.Duration(h.HoldNS)
	}
	return defaultHold
}

// longerHold suggests the hold to rerun with (results.LongerHold).
func longerHold(hold time.Duration) time.Duration { return results.LongerHold(hold) }

func trimPct(f float64) string { return fmt.Sprintf("%.4g%%", f*100) }
