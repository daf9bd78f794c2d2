package results

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"regexp"
	"strings"
	"time"
)

// The HTML reports: one self-contained file each (inline CSS and SVG, no
// script, no external URL), for a run, a comparison and a history, to open
// in a browser or attach to a pull request. They say what the text and
// Markdown reports say, with the pictures inline.

// htmlStyle is every report's CSS: system fonts, readable at 100%.
const htmlStyle = `body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif;font-size:15px;line-height:1.45;max-width:1100px;margin:2em auto;padding:0 1em;color:#111}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #ccc;padding:.2em .6em;text-align:right;font-variant-numeric:tabular-nums}
th:first-child,td:first-child{text-align:left}
pre,code{font-family:ui-monospace,"Liberation Mono",monospace;font-size:13px}pre{background:#f5f5f5;padding:.6em;overflow-x:auto}
.floor{background:#fff3cd;padding:.4em .6em;border-left:4px solid #e69f00}
.pictures{display:flex;flex-wrap:wrap;gap:1em}.pictures figure{margin:0;flex:1 1 480px}
svg{max-width:100%;height:auto}`

// htmlPage is the page every report fills.
var htmlPage = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title><style>{{.Style}}</style></head>
<body>
<h1>{{.Title}}</h1>
{{range .Paragraphs}}<p>{{.}}</p>
{{end}}{{if .Facts}}<ul>{{range .Facts}}<li>{{.}}</li>{{end}}</ul>
{{end}}{{range .Sections}}<h2>{{.Heading}}</h2>
{{if .Warning}}<p class="floor">{{.Warning}}</p>
{{end}}{{if .Pre}}<pre>{{.Pre}}</pre>
{{end}}{{range .Tables}}<table><thead><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr></thead><tbody>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody></table>
{{end}}{{if .Pictures}}<div class="pictures">{{range .Pictures}}<figure>{{.SVG}}<figcaption>{{.Caption}}</figcaption></figure>{{end}}</div>
{{end}}{{range .Paragraphs}}<p>{{.}}</p>
{{end}}{{if .Items}}<ul>{{range .Items}}<li>{{.}}</li>{{end}}</ul>
{{end}}{{end}}</body></html>
`))

type htmlDoc struct {
	Title      string
	Style      template.CSS
	Paragraphs []string
	Facts      []string
	Sections   []htmlSection
}

type htmlSection struct {
	Heading    string
	Warning    string
	Pre        string
	Tables     []htmlTable
	Pictures   []htmlPicture
	Paragraphs []string
	Items      []string
}

type htmlTable struct {
	Head []string
	Rows [][]string
}

type htmlPicture struct {
	SVG     template.HTML
	Caption string
}

// render writes the page.
func (d htmlDoc) render(w io.Writer) error {
	d.Style = template.CSS(htmlStyle)
	return htmlPage.Execute(w, d)
}

// svgProlog is what an inline SVG does without: the XML declaration and
// the namespace declarations (the HTML parser puts <svg> in the SVG
// namespace; the attributes hold URIs a checker would take for links).
var svgProlog = regexp.MustCompile(`<\?xml[^>]*\?>\s*|\s+xmlns(:xlink)?="[^"]*"`)

// inlineSVG draws with draw and returns the SVG for inlining.
func inlineSVG(draw func(io.Writer) error) (template.HTML, error) {
	var b bytes.Buffer
	if err := draw(&b); err != nil {
		return "", err
	}
	// The SVG comes from gonum's writer over our own strings, which it
	// escapes: it is markup to keep, not text to escape.
	return template.HTML(svgProlog.ReplaceAllString(b.String(), "")), nil
}

// distTable is a stage table as the text report has it.
func distTable(title string, rows []Dist) htmlTable {
	t := htmlTable{Head: []string{title, "n", "p50", "p90", "p95", "p99", "max", "U", "covers"}}
	for _, x := range rows {
		t.Rows = append(t.Rows, distCells(x))
	}
	return t
}

// NewHTMLReporter renders a run as one self-contained HTML page: its
// header, the recommendation, the waterfall, the stage tables, the
// clients' failures and the caveats (the reasons among them).
func NewHTMLReporter(s *Summary) Reporter {
	return func(w io.Writer) error {
		d := s.Doc()
		h := s.Header
		doc := htmlDoc{Title: "Pod termination: the propagation window"}
		switch {
		case h != nil && h.Route.Kind == RouteKindHTTPRoute && h.Route.Controller != "":
			doc.Title += " through " + h.Ingress.named(h.Route.Controller, true)
		case h != nil && h.Ingress.Controller != "":
			doc.Title += " through " + h.Ingress.named(h.Ingress.Controller, true)
		}
		doc.Paragraphs = []string{"epwindow deleted one probe pod at a time and timed every stage: " + trialsLine(d) + "."}
		doc.Facts = runLine(h)
		if h != nil && len(h.Ingress.Settings) > 0 {
			doc.Facts = append(doc.Facts, "controller settings: "+strings.ReplaceAll(settingsLine(h.Ingress.Settings), "`", ""))
		}
		if r := d.Recommendation; r != nil {
			sec := htmlSection{Heading: "Recommended settings"}
			floor := ""
			if r.LowerBound() {
				sec.Warning = "Only a lower bound: " + r.FloorCause() + ", so these are at least what the deletions need, not enough."
				floor = "   # at least: rerun with " + rerunHold(h)
			}
			sec.Pre = fmt.Sprintf("spec:\n  terminationGracePeriodSeconds: %d%s\n  containers:\n  - name: app   # every container that serves traffic\n    lifecycle:\n      preStop:\n        sleep:\n          seconds: %d%s",
				r.GraceSeconds, floor, r.PreStopSeconds, floor)
			sec.Items = r.Formula()
			doc.Sections = append(doc.Sections, sec)
		}
		svg, err := inlineSVG(func(w io.Writer) error { return WriteWaterfallSVG(w, s) })
		if err != nil {
			return err
		}
		doc.Sections = append(doc.Sections, htmlSection{Heading: "The deletions", Pictures: []htmlPicture{{SVG: svg,
			Caption: "One lane per trial: every stage after the deletion, the window as a line (≥: cut at the hold); below, the window's CDF with its bound U and the recommended preStop."}}})
		stages := htmlSection{Heading: "Stages", Tables: []htmlTable{distTable("offset from deletion (T0)", d.Stages)}}
		if len(d.Deltas) > 0 {
			stages.Tables = append(stages.Tables, distTable("stage to stage", d.Deltas))
		}
		stages.Paragraphs = append(stages.Paragraphs, "window is the last new traffic the pod received (max of last_accept, last_request) after T0; ≥ marks a floor from trials cut at the hold. "+withSpace(maxLegend(d))+boundLegend(d),
			fmt.Sprintf("Client failures: valid trials %s; all trials %s.", failuresLine(d.ClientFailures), failuresLine(d.ClientFailuresAll)))
		for _, l := range s.grpcFailureLines() {
			stages.Paragraphs = append(stages.Paragraphs, strings.ToUpper(l[:1])+l[1:]+".")
		}
		doc.Sections = append(doc.Sections, stages)
		if len(d.Paths) > 0 {
			cols, rows := pathRows(d)
			t := htmlTable{Rows: rows}
			for _, c := range cols {
				t.Head = append(t.Head, c.head)
			}
			doc.Sections = append(doc.Sections, htmlSection{Heading: "Paths side by side", Tables: []htmlTable{t},
				Paragraphs: []string{d.PathsNote() + " Offsets from T0 unless noted; cluster (runner) failures in all trials: " + failuresLine(d.ClusterFailures) + "."}})
		}
		if c := s.Caveats(); len(c) > 0 {
			doc.Sections = append(doc.Sections, htmlSection{Heading: "Caveats", Items: c})
		}
		return doc.render(w)
	}
}

// NewCompareHTMLReporter renders a comparison as one HTML page: the
// comparison as the text report prints it, and the two runs' waterfalls
// side by side on one time axis.
func NewCompareHTMLReporter(c *Comparison, base, next *Summary) Reporter {
	return func(w io.Writer) error {
		var text bytes.Buffer
		if err := NewCompareTextReporterWidth(c, 0)(&text); err != nil {
			return err
		}
		doc := htmlDoc{Title: "epwindow compare: the baseline against the new run"}
		doc.Sections = append(doc.Sections, htmlSection{Heading: "Verdicts", Pre: text.String()})
		xmax := max(waterfallXMax(base), waterfallXMax(next))
		var pics []htmlPicture
		for _, r := range []struct {
			s       *Summary
			caption string
		}{{base, "baseline"}, {next, "new run"}} {
			svg, err := inlineSVG(func(w io.Writer) error { return writeWaterfallSVG(w, r.s, xmax) })
			if err != nil {
				return err
			}
			pics = append(pics, htmlPicture{SVG: svg, Caption: r.caption})
		}
		doc.Sections = append(doc.Sections, htmlSection{Heading: "The deletions, on one time axis", Pictures: pics})
		return doc.render(w)
	}
}

// NewDriftHTMLReporter renders a history as one HTML page: its newest
// verdict and recommendation, its trend (documented: the preStop the
// platform documents, 0: none) and the segment's run tests.
func NewDriftHTMLReporter(d *Drift, documented time.Duration) Reporter {
	return func(w io.Writer) error {
		var md bytes.Buffer
		if err := NewDriftMarkdownReporter(d, "")(&md); err != nil {
			return err
		}
		doc := htmlDoc{Title: "Propagation window over time"}
		if len(d.Tests) == 0 {
			doc.Paragraphs = []string{"No run recorded yet."}
			return doc.render(w)
		}
		sec := htmlSection{Heading: "The newest run"}
		for _, l := range strings.Split(md.String(), "\n") {
			if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| |") {
				cells := strings.Split(strings.Trim(l, "| "), " | ")
				if len(cells) == 2 {
					sec.Items = append(sec.Items, cells[0]+": "+cells[1])
				}
			}
		}
		svg, err := inlineSVG(func(w io.Writer) error { return WriteDriftChartSVG(w, d, documented) })
		if err != nil {
			return err
		}
		sec.Pictures = []htmlPicture{{SVG: svg, Caption: "The window's upper bound and median per run."}}
		doc.Sections = append(doc.Sections, sec)
		var text bytes.Buffer
		if err := NewDriftTextReporter(d, 0)(&text); err != nil {
			return err
		}
		doc.Sections = append(doc.Sections, htmlSection{Heading: "Segments and run tests", Pre: text.String()})
		return doc.render(w)
	}
}
