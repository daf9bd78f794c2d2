package results

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The deletion waterfall: a run as one picture for docs and pull
// requests. One lane per trial, time from the deletion on the x axis, each
// stage a mark (its shape and colour name it: Okabe–Ito's colour-blind-safe
// palette, and no two stages share a shape and a colour) with its
// uncertainty as a bar; the window as a line from the deletion, open-ended
// with "≥" where the trial was cut at the hold; a trial whose clients
// failed a request carries a cross. Below: the window's empirical CDF with
// its upper bound U and the recommended preStop as vertical lines, labelled
// with the numbers the text report prints.

// WaterfallLanes is the most trials the waterfall draws lane by lane; a run
// with more is thinned to that many, evenly by trial number, and says so.
const WaterfallLanes = 60

// Okabe–Ito, "Color Universal Design": distinguishable with every common
// colour-vision deficiency.
var (
	oiBlack     = color.RGBA{A: 255}
	oiOrange    = color.RGBA{R: 0xE6, G: 0x9F, A: 255}
	oiSky       = color.RGBA{R: 0x56, G: 0xB4, B: 0xE9, A: 255}
	oiGreen     = color.RGBA{G: 0x9E, B: 0x73, A: 255}
	oiBlue      = color.RGBA{G: 0x72, B: 0xB2, A: 255}
	oiVermilion = color.RGBA{R: 0xD5, G: 0x5E, A: 255}
	oiPurple    = color.RGBA{R: 0xCC, G: 0x79, B: 0xA7, A: 255}
	oiGrey      = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 255}
)

// waterfallMark is how one stage is drawn.
type waterfallMark struct {
	stage string
	label string
	shape draw.GlyphDrawer
	color color.Color
}

// waterfallMarks are the stages drawn, in the order the legend lists them:
// the control plane's, the consumers', the node's, then the traffic's.
var waterfallMarks = []waterfallMark{
	{StageSliceNotReady, "slice not ready", draw.TriangleGlyph{}, oiBlue},
	{StageSliceNotServing, "slice not serving", draw.PyramidGlyph{}, oiSky},
	{StageSliceRemoved, "slice removed", draw.SquareGlyph{}, oiBlue},
	{StageUpstreamRemoved, "upstream removed (observer)", draw.BoxGlyph{}, oiOrange},
	{StageDNSRemoved, "DNS removed", draw.RingGlyph{}, oiGreen},
	{StagePrestopCalled, "preStop called", draw.PyramidGlyph{}, oiPurple},
	{StageSigterm, "SIGTERM", draw.PlusGlyph{}, oiPurple},
	{StageClientLastRouted, "client last routed", draw.TriangleGlyph{}, oiOrange},
	{StageClusterLastRouted, "ClusterIP last routed", draw.SquareGlyph{}, oiGreen},
	{StageGRPCLastRouted, "gRPC last routed", draw.BoxGlyph{}, oiGreen},
	{StageLastAccept, "last accept", draw.RingGlyph{}, oiVermilion},
	{StageLastRequest, "last request", draw.CircleGlyph{}, oiVermilion},
	{StageListenerClosed, "listener closed", draw.CrossGlyph{}, oiBlack},
	{StageContainerExit, "container exit", draw.BoxGlyph{}, oiBlack},
}

// NewWaterfallReporter renders the run of s as the waterfall SVG (report
// --format svg).
func NewWaterfallReporter(s *Summary) Reporter {
	return func(w io.Writer) error { return WriteWaterfallSVG(w, s) }
}

// WriteWaterfallSVG draws the run of s (a closed Summary) as an SVG.
func WriteWaterfallSVG(w io.Writer, s *Summary) error { return writeWaterfallSVG(w, s, 0) }

// waterfallXMax is the last instant the waterfall of s marks, in seconds
// after the deletion.
func waterfallXMax(s *Summary) float64 {
	lanes, _ := thinLanes(s.Records())
	return lanesXMax(lanes)
}

// lanesXMax is the last instant lanes mark: a window's end or a stage.
func lanesXMax(lanes []*Record) float64 {
	var x float64
	for _, r := range lanes {
		if v, ok := r.Offset(PointWindow); ok {
			x = max(x, v.Seconds())
		}
		for _, m := range waterfallMarks {
			if st, ok := stageOf(r, m.stage); ok {
				x = max(x, r.offset(st).Seconds())
			}
		}
	}
	return x
}

// writeWaterfallSVG draws the waterfall with its time axis up to xmax
// seconds (0: the run's own last mark), so that two runs drawn side by
// side share one axis.
func writeWaterfallSVG(w io.Writer, s *Summary, xmax float64) error {
	s.mustClosed()
	if len(s.Records()) == 0 {
		// A readable picture that says so, like every other format of
		// an empty run.
		p := plot.New()
		p.Title.Text = "Deletion waterfall: the run has no trial to draw"
		styleText(p)
		p.HideAxes()
		c := vgsvg.New(10*vg.Inch, vg.Inch)
		p.Draw(draw.New(c))
		_, err := c.WriteTo(w)
		return err
	}
	top, bottom, lanes, err := waterfallPlots(s, xmax)
	if err != nil {
		return err
	}
	width, height := waterfallSize(lanes)
	c := vgsvg.New(width, height)
	drawWaterfall(draw.New(c), top, bottom)
	_, err = c.WriteTo(w)
	return err
}

// waterfallPlots are the waterfall's two plots and how many lanes the
// upper one has.
func waterfallPlots(s *Summary, axis float64) (top, bottom *plot.Plot, n int, err error) {
	lanes, note := thinLanes(s.Records())
	top = plot.New()
	top.Title.Text = "Deletion waterfall: one lane per trial"
	if note != "" {
		top.Title.Text += " (" + note + ")"
	}
	top.X.Label.Text = "seconds after the deletion (T0)"
	top.Y.Label.Text = "trial"
	styleText(top)
	top.Y.Min, top.Y.Max = 0, float64(len(lanes)+1)
	top.Y.Tick.Marker = laneTicks(lanes)
	top.X.Min = 0

	// The window, a line per lane from T0 to the traffic's end; cut trials
	// end in "≥".
	var floors plotter.XYLabels
	for i, r := range lanes {
		y := float64(len(lanes) - i)
		v, ok := r.Offset(PointWindow)
		if !ok {
			continue
		}
		x := v.Seconds()
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: x, Y: y}})
		if err != nil {
			return nil, nil, 0, err
		}
		l.Color, l.Width = oiGrey, vg.Points(1)
		if r.Censored() {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			floors.XYs = append(floors.XYs, plotter.XY{X: x, Y: y})
			floors.Labels = append(floors.Labels, " ≥")
		}
		top.Add(l)
	}
	if len(floors.XYs) > 0 {
		lb, err := plotter.NewLabels(floors)
		if err != nil {
			return nil, nil, 0, err
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font.Size = vg.Points(11)
			lb.TextStyle[i].YAlign = draw.YCenter
		}
		top.Add(lb)
	}
	for _, m := range waterfallMarks {
		var pts plotter.XYs
		var errs plotter.XErrors
		for i, r := range lanes {
			st, ok := stageOf(r, m.stage)
			if !ok {
				continue
			}
			pts = append(pts, plotter.XY{X: r.offset(st).Seconds(), Y: float64(len(lanes) - i)})
			u := time.Duration(st.UncertaintyNS).Seconds()
			errs = append(errs, struct{ Low, High float64 }{u, u})
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, nil, 0, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Shape: m.shape, Color: m.color, Radius: vg.Points(3)}
		top.Add(sc)
		top.Legend.Add(m.label, sc)
		if slices.ContainsFunc(errs, func(e struct{ Low, High float64 }) bool { return e.Low > 0 }) {
			eb, err := plotter.NewXErrorBars(struct {
				plotter.XYer
				plotter.XErrorer
			}{pts, errs})
			if err != nil {
				return nil, nil, 0, err
			}
			eb.Color = m.color
			eb.CapWidth = vg.Points(3)
			top.Add(eb)
		}
	}
	var failed plotter.XYs
	for i, r := range lanes {
		if len(r.ClientFailures) > 0 || (r.GRPC != nil && len(r.GRPC.Failures) > 0) {
			failed = append(failed, plotter.XY{X: 0, Y: float64(len(lanes) - i)})
		}
	}
	if len(failed) > 0 {
		sc, err := plotter.NewScatter(failed)
		if err != nil {
			return nil, nil, 0, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Shape: draw.CrossGlyph{}, Color: oiVermilion, Radius: vg.Points(4)}
		top.Add(sc)
		top.Legend.Add("a client failed a request (at T0)", sc)
	}
	// Room on the right for the legend, so that it sits on no mark.
	top.X.Max = max(lanesXMax(lanes), axis) * 1.5
	top.X.Tick.Marker = secondTicks{}
	top.Legend.Top, top.Legend.Left = false, false
	top.Legend.XOffs = vg.Points(0)

	bottom, err = windowCDF(s, top.X.Max)
	return top, bottom, len(lanes), err
}

// waterfallSize is the picture's size for lanes lanes: 11 pt a lane above
// the CDF's 3 inches.
func waterfallSize(lanes int) (width, height vg.Length) {
	return 10 * vg.Inch, max(4*vg.Inch, vg.Length(lanes)*vg.Points(11)+2*vg.Inch) + 3*vg.Inch
}

// drawWaterfall draws the lanes above the CDF on dc.
func drawWaterfall(dc draw.Canvas, top, bottom interface{ Draw(draw.Canvas) }) {
	cdf, gap := 3*vg.Inch, vg.Points(12)
	top.Draw(draw.Crop(dc, 0, 0, cdf+gap, 0))
	bottom.Draw(draw.Crop(dc, 0, 0, 0, -(dc.Max.Y - dc.Min.Y - cdf)))
}

// windowCDF is the window's empirical CDF over the valid trials, with the
// window's upper bound U and the recommended preStop as labelled lines,
// on the waterfall's x axis (up to xmax).
func windowCDF(s *Summary, xmax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "window: share of deletions at or under"
	p.X.Label.Text = "seconds after the deletion (T0)"
	p.Y.Label.Text = "share"
	styleText(p)
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, xmax, 0, 1.05
	p.X.Tick.Marker = secondTicks{}
	d, ok := s.Dist(PointWindow)
	if !ok || d.N == 0 {
		p.Title.Text += ": no trial measured the window"
		return p, nil
	}
	var vals []float64
	for _, r := range s.Records() {
		if r.PointValid(PointWindow) {
			if v, ok := r.Offset(PointWindow); ok {
				vals = append(vals, v.Seconds())
			}
		}
	}
	slices.Sort(vals)
	var steps plotter.XYs
	for i, v := range vals {
		steps = append(steps, plotter.XY{X: v, Y: float64(i) / float64(len(vals))}, plotter.XY{X: v, Y: float64(i+1) / float64(len(vals))})
	}
	l, err := plotter.NewLine(steps)
	if err != nil {
		return nil, err
	}
	l.Color, l.Width = oiVermilion, vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(fmt.Sprintf("window, %d trials", len(vals)), l)
	vline := func(x float64, c color.Color, dashes []vg.Length, label string) error {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: 1.05}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes, l.Width = c, dashes, vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(label, l)
		return nil
	}
	if b := d.Bound; b != nil {
		u, covers := boundCells(d)
		if err := vline(time.Duration(b.NS).Seconds(), oiBlue, []vg.Length{vg.Points(5), vg.Points(3)},
			fmt.Sprintf("U %s (covers %s)", u, covers)); err != nil {
			return nil, err
		}
	}
	if r := s.Doc().Recommendation; r != nil {
		ge := ""
		if r.LowerBound() {
			ge = "≥ "
		}
		if err := vline(float64(r.PreStopSeconds), oiBlack, []vg.Length{vg.Points(2), vg.Points(2)},
			fmt.Sprintf("recommended preStop %s%ds (from preStop called)", ge, r.PreStopSeconds)); err != nil {
			return nil, err
		}
		p.X.Max = max(p.X.Max, float64(r.PreStopSeconds)*1.02)
	}
	p.Legend.Top, p.Legend.Left = false, false
	return p, nil
}

// secondTicks marks the time axis at a round step (0.5, 1, 2, 5, 10, 20,
// 30 or 60 s) that leaves at most 12 labelled ticks.
type secondTicks struct{}

func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 60.0
	for _, st := range []float64{0.5, 1, 2, 5, 10, 20, 30, 60} {
		if (hi-lo)/st <= 12 {
			step = st
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ts
}

// stageOf is the stage a lane marks: the latest instance of a keyed stage
// (the last observer replica, the last peer), the first otherwise, and
// only where the trial's reasons leave it valid.
func stageOf(r *Record, name string) (Stage, bool) {
	if !r.PointValid(name) {
		return Stage{}, false
	}
	if Keyed(name) {
		return r.StageMax(name)
	}
	return r.Stage(name)
}

// thinLanes is the trials drawn: all of them up to WaterfallLanes, else
// that many spread evenly over the run, with a note saying so.
func thinLanes(recs []*Record) ([]*Record, string) {
	if len(recs) <= WaterfallLanes {
		return recs, ""
	}
	out := make([]*Record, 0, WaterfallLanes)
	for i := range WaterfallLanes {
		out = append(out, recs[i*len(recs)/WaterfallLanes])
	}
	return out, fmt.Sprintf("%d of %d trials, evenly spaced", WaterfallLanes, len(recs))
}

// laneTicks labels the lanes with their trial numbers (every fifth, and
// the first and last, when there are many).
func laneTicks(lanes []*Record) plot.Ticker {
	return plot.TickerFunc(func(_, _ float64) []plot.Tick {
		var ts []plot.Tick
		for i, r := range lanes {
			label := ""
			if len(lanes) <= 20 || i == 0 || i == len(lanes)-1 || r.Trial%5 == 0 {
				label = strconv.Itoa(r.Trial)
			}
			ts = append(ts, plot.Tick{Value: float64(len(lanes) - i), Label: label})
		}
		return ts
	})
}

// styleText makes every text of p at least 10 px (11 px ticks, 12 px
// labels, 13 px title): legible at 100% in a docs page.
func styleText(p *plot.Plot) {
	p.Title.TextStyle.Font.Size = vg.Points(13)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(12)
		a.Tick.Label.Font.Size = vg.Points(11)
	}
	p.Legend.TextStyle.Font.Size = vg.Points(11)
}
