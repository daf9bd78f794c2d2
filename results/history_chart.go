package results

import (
	"fmt"
	"image/color"
	"io"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WriteDriftChartSVG draws the newest segment of a history as an SVG
// chart: per run, against its start time, the upper bound its window side
// puts on the window the preStop covers (a floor drawn hollow), the
// window's median, and the preStop the platform documents as a dashed
// line (documented 0: none). Runs whose window side has no bound (too few
// trials for the quantile) have no bound point.
func WriteDriftChartSVG(w io.Writer, d *Drift, documented time.Duration) error {
	if len(d.Tests) == 0 {
		return fmt.Errorf("the history holds no run")
	}
	p := plot.New()
	p.Title.Text = "Propagation window per scheduled run"
	p.X.Label.Text = "run started (UTC)"
	p.Y.Label.Text = "seconds"
	p.X.Tick.Marker = plot.TimeTicks{Format: "01-02 15:04"}
	p.Y.Min = 0
	var bound, floor, median plotter.XYs
	first, last := 0.0, 0.0
	for i, v := range d.Tests {
		x := float64(d.Runs[v.Run].File.Header.StartedAt.Unix())
		if i == 0 {
			first = x
		}
		last = x
		if v.WindowP50NS != 0 {
			median = append(median, plotter.XY{X: x, Y: time.Duration(v.WindowP50NS).Seconds()})
		}
		if v.BoundNS == 0 {
			continue
		}
		pt := plotter.XY{X: x, Y: time.Duration(v.BoundNS).Seconds()}
		if v.BoundFloor {
			floor = append(floor, pt)
		} else {
			bound = append(bound, pt)
		}
	}
	if len(median) > 0 {
		l, err := plotter.NewLine(median)
		if err != nil {
			return err
		}
		l.Color = color.RGBA{R: 90, G: 90, B: 90, A: 255}
		p.Add(l)
		p.Legend.Add("window, median", l)
	}
	for _, s := range []struct {
		xy    plotter.XYs
		label string
		glyph draw.GlyphDrawer
	}{{bound, "window the preStop covers, upper bound", draw.CircleGlyph{}}, {floor, "the same, only a floor (cut at the hold)", draw.RingGlyph{}}} {
		if len(s.xy) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(s.xy)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Shape = s.glyph
		sc.GlyphStyle.Color = color.RGBA{R: 200, G: 40, B: 40, A: 255}
		sc.GlyphStyle.Radius = vg.Points(3)
		p.Add(sc)
		p.Legend.Add(s.label, sc)
	}
	if documented > 0 {
		if last == first {
			last = first + 1
		}
		l, err := plotter.NewLine(plotter.XYs{{X: first, Y: documented.Seconds()}, {X: last, Y: documented.Seconds()}})
		if err != nil {
			return err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Color = color.RGBA{B: 200, A: 255}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("documented preStop (%s)", documented), l)
	}
	// Headroom above the highest value for the legend (top right), so it
	// never sits on a point.
	top := documented.Seconds()
	for _, xys := range []plotter.XYs{bound, floor, median} {
		for _, pt := range xys {
			top = max(top, pt.Y)
		}
	}
	p.Y.Max = 1.45 * top
	p.Legend.Top = true
	wt, err := p.WriterTo(8*vg.Inch, 4*vg.Inch, "svg")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

// NewDriftMarkdownReporter renders a history for platform docs: the newest
// run, its drift verdict, the recommendation its pooled runs make, the
// segment's start and what changed there, and the chart (chart is its
// path as the Markdown links it; "" leaves it out).
func NewDriftMarkdownReporter(d *Drift, chart string) Reporter {
	return func(w io.Writer) error {
		e := &errWriter{w: w}
		e.printf("## Propagation window over time\n\n")
		if len(d.Tests) == 0 {
			e.printf("No run recorded yet.\n")
			return e.err
		}
		seg := d.Segments[len(d.Segments)-1]
		l := d.Latest
		newest := d.Runs[l.Run]
		e.printf("%d runs since %s with these settings", seg.Last-seg.First+1, d.Runs[seg.First].File.Header.StartedAt.UTC().Format("2006-01-02 15:04Z"))
		if len(seg.Changes) > 0 {
			e.printf(" (changed then: %s)", strings.Join(seg.Changes, "; "))
		}
		e.printf("; newest %s, %s.\n\n", newest.Name, newest.File.Header.StartedAt.UTC().Format("2006-01-02 15:04Z"))
		if chart != "" {
			e.printf("![The window's upper bound and median per run](%s)\n\n", chart)
		}
		e.printf("| | |\n|---|---|\n")
		e.printf("| drift | %s |\n", d.describe(l))
		if r := d.WindowSummary().doc.Recommendation; r != nil {
			ge := ""
			if r.LowerBound() {
				ge = "≥ "
			}
			e.printf("| preStop | %s%ds |\n", ge, r.PreStopSeconds)
			e.printf("| terminationGracePeriodSeconds | %s%d |\n", ge, r.GraceSeconds)
			e.printf("| window the preStop covers | %s%s: %s of deletions at or under it, with %s confidence (%d trials) |\n",
				ge, fmtDur(r.CoverNS), pct(r.Bound.Covers), pct(r.Bound.Confidence), r.N)
		} else {
			e.printf("| preStop | no recommendation: the newest runs have no trial with the window and a termination signal |\n")
		}
		return e.err
	}
}
