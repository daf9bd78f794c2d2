package results

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/guptarohit/asciigraph"
)

// PlotWidth is the data width of each chart: with the y-axis labels every
// line stays within 80 columns.
const PlotWidth = 64

// plotSeries are the per-trial series charted, one character each, later
// ones drawn over earlier ones: the node path (SIGTERM), the control plane
// (slice), the ingress (upstream) and the traffic end. A preStop sleep that
// covers the window shows as t above w.
var plotSeries = []struct {
	metric string
	char   string
}{
	{StageSigterm, "t"},
	{StageSliceNotReady, "s"},
	{StageUpstreamRemoved, "u"},
	{PointWindow, "w"},
}

// NewPlotReporter renders terminal charts: the empirical CDF of the window
// over the trials whose probe-clock stages are valid, and per trial (x) the offset from T0 (y, seconds) of
// SIGTERM, slice_not_ready, upstream_removed and the window's end.
func NewPlotReporter(s *Summary) Reporter {
	return func(w io.Writer) error {
		e := &errWriter{w: w}
		win, _ := s.Samples(PointWindow)
		if len(win) == 0 {
			e.printf("no valid trial has a window: nothing to plot\n")
			return e.err
		}
		sorted := sortedCopy(win)
		lo, hi := sorted[0]/1e9, sorted[len(sorted)-1]/1e9
		cdf := make([]float64, PlotWidth)
		for i := range cdf {
			x := lo
			if hi > lo {
				x = lo + (hi-lo)*float64(i)/float64(PlotWidth-1)
			}
			// fraction of windows ≤ x
			n, _ := slices.BinarySearchFunc(sorted, x*1e9, func(v, t float64) int {
				if v <= t {
					return -1
				}
				return 1
			})
			cdf[i] = float64(n) / float64(len(sorted))
		}
		e.printf("%s\n\n", asciigraph.Plot(cdf,
			asciigraph.Height(10), asciigraph.Width(PlotWidth),
			asciigraph.LowerBound(0), asciigraph.UpperBound(1), asciigraph.Precision(2),
			asciigraph.XAxisRange(lo, hi), asciigraph.XAxisTickCount(5),
			asciigraph.XAxisValueFormatter(func(v float64) string { return fmt.Sprintf("%.2fs", v) }),
			asciigraph.Caption(windowCaption(len(win), s.Censored(PointWindow)))))

		var data [][]float64
		var chars []asciigraph.CharSet
		var legend []string
		trials := plottedTrials(s)
		for _, ps := range plotSeries {
			vals, ts := s.Samples(ps.metric)
			if len(vals) == 0 {
				continue
			}
			series := make([]float64, len(trials))
			for i := range series {
				series[i] = math.NaN()
			}
			for i, t := range ts {
				series[slices.Index(trials, t)] = vals[i] / 1e9
			}
			data = append(data, series)
			chars = append(chars, asciigraph.CreateCharSet(ps.char))
			legend = append(legend, ps.char+" "+ps.metric)
		}
		if len(trials) < 2 {
			return e.err
		}
		e.printf("%s\n", asciigraph.PlotMany(data,
			asciigraph.Height(12), asciigraph.Width(PlotWidth), asciigraph.Precision(2),
			asciigraph.SeriesChars(chars...),
			asciigraph.XAxisRange(float64(trials[0]), float64(trials[len(trials)-1])), asciigraph.XAxisTickCount(5),
			asciigraph.XAxisValueFormatter(func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			asciigraph.Caption("offset from T0 (s) per trial")))
		for _, l := range wrap(legend, ", ", 72) {
			e.printf("        %s\n", l)
		}
		return e.err
	}
}

// windowCaption names the CDF chart; censored windows are drawn at their
// floors.
func windowCaption(n, censored int) string {
	c := fmt.Sprintf("CDF of the window (s), n=%d", n)
	if censored > 0 {
		c += fmt.Sprintf(", %d cut at the hold (drawn at their floor)", censored)
	}
	return c
}

// plottedTrials are the trial numbers with a value in any plotted series,
// ascending.
func plottedTrials(s *Summary) []int {
	var out []int
	for _, ps := range plotSeries {
		_, ts := s.Samples(ps.metric)
		out = append(out, ts...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
