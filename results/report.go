package results

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Reporter renders a closed Summary.
type Reporter func(io.Writer) error

// Reporters maps each --format name to its constructor. Read-only.
var Reporters = map[string]func(*Summary) Reporter{
	"text":     NewTextReporter,
	"markdown": NewMarkdownReporter,
	"json":     NewJSONReporter,
	"csv":      NewCSVReporter,
	"perfdata": NewPerfDataReporter,
	"svg":      NewWaterfallReporter,
	"html":     NewHTMLReporter,
}

// ReporterNames are the keys of Reporters, sorted.
func ReporterNames() []string { return slices.Sorted(maps.Keys(Reporters)) }

// errWriter keeps the first write error so renderers can print freely and
// check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, a ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, a...)
	}
}

// named is controller with its version ("skipper v0.27.57"), or, when the
// header has none and says why, with that: "skipper, version not exposed",
// or in parentheses for a title, "skipper (version not exposed)"; "" without
// a controller.
func (in Ingress) named(controller string, paren bool) string {
	switch {
	case controller == "":
		return ""
	case in.Version != "":
		return controller + " " + in.Version
	case in.VersionNote != "" && paren:
		return controller + " (version " + in.VersionNote + ")"
	case in.VersionNote != "":
		return controller + ", version " + in.VersionNote
	}
	return controller
}

// runLine describes the run in one line from the header.
func runLine(h *Header) []string {
	if h == nil {
		return nil
	}
	var parts []string
	if h.Cluster != "" {
		parts = append(parts, "cluster "+h.Cluster)
	}
	if h.ServerVersion != "" {
		parts = append(parts, "Kubernetes "+h.ServerVersion)
	}
	if r := h.Route; r.Kind == RouteKindHTTPRoute {
		// The Gateway's controller, not an IngressClass's, routed the load.
		s := "HTTPRoute on Gateway " + r.Gateway
		var class []string
		if r.GatewayClass != "" {
			class = append(class, "class "+r.GatewayClass)
		}
		if c := h.Ingress.named(r.Controller, false); c != "" {
			class = append(class, "controller "+c)
		}
		if len(class) > 0 {
			s += " (" + strings.Join(class, ", ") + ")"
		}
		parts = append(parts, s)
	} else if in := h.Ingress; in.Controller != "" || in.Class != "" {
		// An explicit --observer skips reading the IngressClass: the
		// controller is then the one the observer reads (older files:
		// none, only the class).
		s := strings.TrimSpace("ingress " + in.named(in.Controller, false))
		if in.Class != "" {
			s += " (class " + in.Class + ")"
		}
		parts = append(parts, s)
	}
	for _, o := range h.Observers {
		parts = append(parts, observerPart(o))
	}
	if h.Mode != "" {
		parts = append(parts, "mode "+h.Mode)
	}
	if h.Replicas > 0 {
		parts = append(parts, fmt.Sprintf("%d replicas", h.Replicas))
	}
	if h.Rate > 0 {
		conn := "new connection per request"
		if h.Keepalive {
			conn = "keep-alive"
		}
		parts = append(parts, fmt.Sprintf("%s req/s, %s", trimFloat(h.Rate), conn))
	}
	if !h.StartedAt.IsZero() {
		parts = append(parts, "started "+h.StartedAt.UTC().Format(time.RFC3339))
	}
	if h.ToolVersion != "" {
		parts = append(parts, "epwindow "+h.ToolVersion)
	}
	return parts
}

// wrap joins parts with sep into lines of at most width runes (a part
// longer than width gets a line of its own).
func wrap(parts []string, sep string, width int) []string {
	var lines []string
	cur := ""
	for _, p := range parts {
		switch {
		case cur == "":
			cur = p
		case utf8.RuneCountInString(cur+sep+p) <= width:
			cur += sep + p
		default:
			lines = append(lines, cur)
			cur = p
		}
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

// plural renders "1 trial" / "2 trials".
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

func trialsLine(d *SummaryDoc) string {
	s := fmt.Sprintf("%s, %d valid", plural(d.Trials, "trial", "trials"), d.Valid)
	if d.Censored > 0 {
		where := "at the hold"
		switch hold, closed := d.InvalidReasons[ReasonHoldReached], d.InvalidReasons[ReasonListenerClosed]; {
		case closed > 0 && hold > 0:
			where = "at the hold or at listener_closed"
		case closed > 0:
			// A team's pod (measure --target): the app stopped listening
			// while it was still routed to.
			where = "at listener_closed"
		}
		s += fmt.Sprintf(", %d censored %s", d.Censored, where)
	}
	if n := d.Trials - d.Valid; n > 0 {
		s += fmt.Sprintf(", %d with reasons (%s)", n, strings.Join(reasonParts(d, false), ", "))
	}
	if d.Interrupted {
		s += " — INTERRUPTED run"
	}
	return s
}

func failuresLine(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// grpcFailureLines are the gRPC DNS clients' failures, a line per client
// that ran (the header names its target, or it failed calls): "none" only
// when it failed no call.
func (s *Summary) grpcFailureLines() []string {
	d := s.Doc()
	var g GRPCDNS
	if s.Header != nil && s.Header.GRPCDNS != nil {
		g = *s.Header.GRPCDNS
	}
	var out []string
	if g.Target != "" || len(d.GRPCFailures) > 0 {
		out = append(out, "gRPC DNS client failures (this machine's): all trials "+failuresLine(d.GRPCFailures))
	}
	if g.RunnerTarget != "" || len(d.RunnerGRPCFailures) > 0 {
		out = append(out, "gRPC DNS client failures (the runners'): all trials "+failuresLine(d.RunnerGRPCFailures))
	}
	return out
}

// distCells are a stage table's row of d, as every report prints it: the
// name, n, p50 … p99, max (each a floor, "max" or a value, see cell), U and
// what it covers.
func distCells(d Dist) []string {
	u, covers := boundCells(d)
	return []string{d.Name, fmt.Sprint(d.N), cell(d, d.P50NS, 0.5), cell(d, d.P90NS, 0.9), cell(d, d.P95NS, 0.95),
		cell(d, d.P99NS, 0.99), cell(d, d.MaxNS, 1), u, covers}
}

// cell renders a distribution's p-percentile (1 for the maximum) ns, "≥"
// when it is a censored trial's floor, "max" when there are too few trials
// for it to be anything but the largest (see maxLegend).
func cell(d Dist, ns int64, p float64) string {
	if d.N == 0 {
		return "-"
	}
	if p < 1 && d.N < MaxIsQuantile(p) {
		// Under 1/(1−p) trials the empirical p-percentile is the largest
		// trial: a column headed p99 must not present it as one.
		return "max"
	}
	if d.Lower(p) {
		return "≥" + fmtDur(ns)
	}
	return fmtDur(ns)
}

// boundCells renders a distribution's upper bound and the quantile it
// covers ("*" marks a maximum that covers less than asked).
func boundCells(d Dist) (u, covers string) {
	b := d.Bound
	if b == nil {
		return "-", "-"
	}
	u = fmtDur(b.NS)
	if b.LowerBound {
		u = "≥" + u
	}
	covers = pct(b.Covers)
	if !b.Enough() {
		covers += "*"
	}
	return u, covers
}

// maxLegend explains "max" in a percentile column, when some distribution
// has too few trials for one ("" otherwise).
func maxLegend(d *SummaryDoc) string {
	for _, x := range d.allDists() {
		if x.N > 0 && x.N < MaxIsQuantile(0.99) {
			return fmt.Sprintf("max in a p50–p99 column: under 1/(1−q) trials (p90: %d, p95: %d, p99: %d) that percentile is the largest trial, not an estimate of it; the max column shows its value.",
				MaxIsQuantile(0.9), MaxIsQuantile(0.95), MaxIsQuantile(0.99))
		}
	}
	return ""
}

// withSpace is s and a space, or "" for "".
func withSpace(s string) string {
	if s == "" {
		return ""
	}
	return s + " "
}

// boundLegend explains the U and covers columns.
func boundLegend(d *SummaryDoc) string {
	return fmt.Sprintf("U is a %s upper confidence bound of the p%s (order statistics, exact binomial); covers is the share of deletions it bounds at %s, * where the trials were too few for p%s (that needs %d).",
		pct(d.Confidence), trimFloat(d.Quantile*100), pct(d.Confidence), trimFloat(d.Quantile*100), TrialsNeeded(d.Quantile, d.Confidence))
}

// NewTextReporter renders an aligned table for a terminal: per point and
// per stage-to-stage delta n, p50, p90, p95, p99, max, then the
// recommendation and its caveats. Every line fits TextWidth columns.
func NewTextReporter(s *Summary) Reporter { return NewTextReporterWidth(s, TextWidth) }

// NewTextReporterWidth is NewTextReporter for a terminal width columns
// wide (<= 0: no limit, every column at its roomiest). The tables take
// their roomy layout when it fits and narrow their columns, then move a
// long stage name onto a line of its own, when it does not.
func NewTextReporterWidth(s *Summary, width int) Reporter {
	render := textReport(s, width)
	if width <= 0 {
		return render
	}
	// Every section fits its tables to width; a line of prose a section
	// did not wrap (a streams heading naming a long path, a footnote) is
	// wrapped here, so that nothing reaches past the terminal.
	return func(w io.Writer) error {
		var b strings.Builder
		if err := render(&b); err != nil {
			return err
		}
		_, err := io.WriteString(w, FitLines(b.String(), width))
		return err
	}
}

// FitLines wraps every line of prose in text longer than width runes at
// its spaces, each continuation indented two columns past the line's own
// indent. A line that fits, a table row (columns padded with runs of
// spaces: the tables fit themselves, down to their narrowest layout) and a
// word longer than width are left whole.
func FitLines(text string, width int) string {
	var out strings.Builder
	for i, line := range strings.Split(text, "\n") {
		if i > 0 {
			out.WriteByte('\n')
		}
		body := strings.TrimLeft(line, " ")
		if utf8.RuneCountInString(line) <= width || strings.Contains(body, "  ") {
			out.WriteString(line)
			continue
		}
		indent := line[:len(line)-len(body)]
		for j, l := range wrap(strings.Fields(line), " ", width-len(indent)-2) {
			if j > 0 {
				out.WriteString("\n  ")
			}
			out.WriteString(indent + l)
		}
	}
	return out.String()
}

// fitProse is a paragraph of prose as one line, wrapped by FitLines: its
// words at most width runes a line, continuations indented two columns.
func fitProse(text string, width int) string {
	return FitLines(strings.Join(strings.Fields(text), " "), width)
}

// textReport renders the text report, its tables fitted to width.
func textReport(s *Summary, width int) Reporter {
	return func(w io.Writer) error {
		d := s.Doc()
		e := &errWriter{w: w}
		lineWidth := width
		if lineWidth <= 0 {
			lineWidth = TextWidth
		}
		e.printf("%s\n", fitProse("epwindow report: "+trialsLine(d), lineWidth))
		for _, l := range wrap(runLine(s.Header), " · ", 76) {
			e.printf("  %s\n", l)
		}
		if h := s.Header; h != nil && len(h.Ingress.Settings) > 0 {
			settings := strings.ReplaceAll(settingsLine(h.Ingress.Settings), "`", "")
			for i, l := range wrap(strings.Fields("controller settings: "+settings), " ", lineWidth-2) {
				if i > 0 {
					l = "  " + l
				}
				e.printf("  %s\n", l)
			}
		}
		// Tables of one run share the name column's width when it fits.
		nameWidth := len("offsets from T0 (delete_sent)")
		for _, x := range d.allDists() {
			nameWidth = max(nameWidth, utf8.RuneCountInString(x.Name))
		}
		table := func(title string, rows []Dist, unc bool) {
			cols := []column{{head: title, left: true, roomy: nameWidth}, {head: "n", roomy: 4}}
			for _, h := range []string{"p50", "p90", "p95", "p99", "max", "U"} {
				cols = append(cols, column{head: h, roomy: 9, group: 1})
			}
			cols = append(cols, column{head: "covers", roomy: 6})
			if unc {
				cols = append(cols, column{head: "±", roomy: 8})
			}
			var cells [][]string
			for _, x := range rows {
				r := distCells(x)
				if unc {
					u := "-"
					if x.MaxUncertaintyNS > 0 {
						u = fmtDur(x.MaxUncertaintyNS)
					}
					r = append(r, u)
				}
				cells = append(cells, r)
			}
			e.printf("\n")
			for _, l := range layoutTable(cols, cells, width, " ") {
				e.printf("%s\n", l)
			}
		}
		table("offsets from T0 (delete_sent)", d.Stages, true)
		if len(d.Deltas) > 0 {
			table("stage to stage", d.Deltas, false)
		}
		e.printf("\n")
		floors := "trials cut at the hold"
		if d.InvalidReasons[ReasonListenerClosed] > 0 {
			floors = "trials cut at the hold or at listener_closed (the app stopped listening while routed to)"
		}
		e.printf("%s\n", fitProse("window = max(last_accept, last_request) − T0; ± is the largest error bound of a sample; ≥ marks a floor from "+floors+".", lineWidth))
		if l := maxLegend(d); l != "" {
			e.printf("%s\n", fitProse(l, lineWidth))
		}
		e.printf("%s\n", fitProse(boundLegend(d), lineWidth))
		if h := s.Header; h != nil && h.Target != nil && h.Rate == 0 {
			// measure --target --rate 0: the app's own clients, whose
			// failures this run cannot see: never "none".
			e.printf("%s\n", fitProse("client failures: not known — the run sent no load (--rate 0: the app's own traffic); its clients' failures are theirs to count", lineWidth))
		} else {
			e.printf("client failures: valid trials %s; all trials %s\n", failuresLine(d.ClientFailures), failuresLine(d.ClientFailuresAll))
		}
		for _, l := range s.grpcFailureLines() {
			e.printf("%s\n", l)
		}
		if len(d.Paths) > 0 {
			cols, rows := pathRows(d)
			e.printf("\npaths side by side (offsets from T0 unless noted)\n")
			lines := layoutTable(cols, rows, width, "  ")
			if width > 0 && tableWidth(cols, rows, "  ") > width {
				// Too wide for the terminal: the last routed response in
				// one table, what follows the slice's not-ready in another.
				ac, ar, bc, br := splitColumns(cols, rows, pathsSplit)
				lines = append(append(layoutTable(ac, ar, width, "  "), ""), layoutTable(bc, br, width, "  ")...)
			}
			for _, l := range lines {
				e.printf("%s\n", l)
			}
			for _, l := range wrap(strings.Fields(d.PathsNote()), " ", lineWidth) {
				e.printf("%s\n", l)
			}
			e.printf("cluster (runner) failures: all trials %s\n", failuresLine(d.ClusterFailures))
		}
		if len(d.StartupStages) > 0 {
			e.printf("\nstartup of the replacement pods\n")
			table("startup, offsets from T0", d.StartupStages, true)
			if len(d.StartupDeltas) > 0 {
				table("startup stage to stage", d.StartupDeltas, false)
			}
			e.printf("\nclient failures during startup (routed, not yet listening): %s\n", failuresLine(d.StartupFailures))
		}
		if r := d.StartupRecommendation; r != nil {
			e.printf("\nstartup recommendation\n")
			for _, l := range r.Lines() {
				for i, w := range wrap(strings.Fields(l), " ", 74) {
					if i == 0 {
						e.printf("  - %s\n", w)
					} else {
						e.printf("    %s\n", w)
					}
				}
			}
		}
		if r := d.Recommendation; r != nil {
			e.printf("\nrecommendation (n=%d", r.N)
			if r.Censored > 0 {
				e.printf(", %d censored", r.Censored)
			}
			e.printf(")\n")
			for _, l := range r.Formula() {
				for i, w := range wrap(strings.Fields(l), " ", lineWidth-4) {
					if i == 0 {
						e.printf("  %s\n", w)
					} else {
						e.printf("    %s\n", w)
					}
				}
			}
		}
		if e.err == nil {
			e.err = s.streamsSection(w)
		}
		if c := s.Caveats(); len(c) > 0 {
			e.printf("\ncaveats\n")
			for _, l := range c {
				for i, w := range wrap(strings.Fields(l), " ", 74) {
					if i == 0 {
						e.printf("  - %s\n", w)
					} else {
						e.printf("    %s\n", w)
					}
				}
			}
		}
		return e.err
	}
}

// NewMarkdownReporter renders a self-contained section for platform docs:
// the run, the tables, the recommended settings with their formula, and the
// caveats.
func NewMarkdownReporter(s *Summary) Reporter { return NewMarkdownReporterWith(s, "") }

// NewMarkdownReporterWith is NewMarkdownReporter linking the run's
// waterfall picture at picture (its path as the Markdown links it; "":
// none) under the title.
func NewMarkdownReporterWith(s *Summary, picture string) Reporter {
	return func(w io.Writer) error {
		d := s.Doc()
		h := s.Header
		e := &errWriter{w: w}
		title := "Pod termination: the propagation window"
		switch {
		case h != nil && h.Route.Kind == RouteKindHTTPRoute && h.Route.Controller != "":
			title += " through " + h.Ingress.named(h.Route.Controller, true)
		case h != nil && h.Ingress.Controller != "":
			title += " through " + h.Ingress.named(h.Ingress.Controller, true)
		}
		e.printf("## %s\n\n", title)
		if picture != "" {
			e.printf("![The deletion waterfall: each trial's stages after the deletion, and the window's CDF with its bound and the recommended preStop](%s)\n\n", picture)
		}
		e.printf("How long a deleted pod still receives new traffic, measured with epwindow by deleting one probe pod at a time and timing every stage")
		if h != nil && !h.StartedAt.IsZero() {
			e.printf(" on %s", h.StartedAt.UTC().Format("2006-01-02"))
		}
		e.printf(": %s.\n\n", trialsLine(d))
		if parts := runLine(h); len(parts) > 0 {
			for _, p := range parts {
				e.printf("- %s\n", p)
			}
			if h != nil && len(h.Ingress.Settings) > 0 {
				e.printf("- controller settings: %s\n", settingsLine(h.Ingress.Settings))
			}
			if h != nil {
				for _, o := range h.Observers {
					if len(o.Settings) > 0 && !maps.Equal(o.Settings, h.Ingress.Settings) {
						e.printf("- observer %s settings: %s\n", o.Name, settingsLine(o.Settings))
					}
				}
			}
			e.printf("\n")
		}
		if r := d.Recommendation; r != nil {
			e.printf("### Recommended settings\n\n")
			floor := ""
			if r.LowerBound() {
				// A floor pasted as a plain number would be taken for the
				// answer: the YAML itself says it is not.
				floor = "   # at least: rerun with " + rerunHold(h) + " (trials cut at the hold)"
				e.printf("**Only a lower bound**: %s, so these are at least what the deletions need, not enough.\n\n", r.FloorCause())
			}
			e.printf("```yaml\nspec:\n  terminationGracePeriodSeconds: %d%s\n  containers:\n  - name: app   # every container that serves traffic\n    lifecycle:\n      preStop:\n        sleep:\n          seconds: %d%s\n```\n\n", r.GraceSeconds, floor, r.PreStopSeconds, floor)
			e.printf("The `sleep` handler needs Kubernetes 1.30 or later; elsewhere use `exec: {command: [\"sleep\", \"%d\"]}` in an image with `sleep`, or delay shutdown in the app by as much.\n\n", r.PreStopSeconds)
			for _, l := range r.Formula() {
				e.printf("- `%s`\n", l)
			}
			e.printf("- n = %d", r.N)
			if r.Censored > 0 {
				e.printf(", %d of them cut at the hold", r.Censored)
			}
			e.printf("; U is a distribution-free upper confidence bound from order statistics\n\n")
		}
		mdTable := func(title string, rows []Dist) {
			e.printf("| %s | n | p50 | p90 | p95 | p99 | max | U | covers |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n", title)
			for _, x := range rows {
				r := distCells(x)
				r[0] = "`" + r[0] + "`"
				e.printf("| %s |\n", strings.Join(r, " | "))
			}
			e.printf("\n")
		}
		e.printf("### Stages\n\n")
		mdTable("offset from deletion (T0)", d.Stages)
		if len(d.Deltas) > 0 {
			mdTable("stage to stage", d.Deltas)
		}
		e.printf("`window` is the last new traffic the pod received (max of `last_accept`, `last_request`) after T0; ≥ marks a floor from trials cut at the hold. %s%s Client failures: valid trials %s; all trials %s.\n\n",
			withSpace(maxLegend(d)), boundLegend(d), failuresLine(d.ClientFailures), failuresLine(d.ClientFailuresAll))
		for _, l := range s.grpcFailureLines() {
			e.printf("%s.\n\n", strings.ToUpper(l[:1])+l[1:])
		}
		if len(d.Paths) > 0 {
			cols, rows := pathRows(d)
			header := make([]string, len(cols))
			for i, c := range cols {
				header[i] = c.head
			}
			e.printf("### Paths side by side\n\n| %s |\n|---|---|%s\n", strings.Join(header, " | "), strings.Repeat("--:|", len(header)-2))
			for _, r := range rows {
				r[0], r[1] = "`"+r[0]+"`", "`"+r[1]+"`"
				e.printf("| %s |\n", strings.Join(r, " | "))
			}
			e.printf("\n%s Offsets from T0 unless noted; cluster (runner) failures in all trials: %s.\n\n", d.PathsNote(), failuresLine(d.ClusterFailures))
		}
		if len(d.StartupStages) > 0 {
			e.printf("### Startup of the replacement pods\n\n")
			mdTable("offset from deletion (T0)", d.StartupStages)
			if len(d.StartupDeltas) > 0 {
				mdTable("stage to stage", d.StartupDeltas)
			}
			e.printf("Client failures during startup (routed, not yet listening): %s.\n\n", failuresLine(d.StartupFailures))
		}
		if r := d.StartupRecommendation; r != nil {
			for _, l := range r.Lines() {
				e.printf("- %s\n", l)
			}
			e.printf("\n")
		}
		if c := s.Caveats(); len(c) > 0 {
			e.printf("### Caveats\n\n")
			for _, l := range c {
				e.printf("- %s\n", l)
			}
		}
		return e.err
	}
}

func settingsLine(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("`%s=%s`", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// JSONReport is the json report: the run's header and its summary.
type JSONReport struct {
	Header  *Header     `json:"header,omitempty"`
	Summary *SummaryDoc `json:"summary"`
}

// NewJSONReporter renders the header and summary as indented JSON,
// durations in integer nanoseconds.
func NewJSONReporter(s *Summary) Reporter {
	return func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(JSONReport{Header: s.Header, Summary: s.Doc()})
	}
}

// NewCSVReporter renders every trial, valid or not, one row per trial and
// stage (the layout Decode reads back).
func NewCSVReporter(s *Summary) Reporter {
	return func(w io.Writer) error {
		enc := NewCSVEncoder(w)
		for _, r := range s.Records() {
			if err := enc(r); err != nil {
				return err
			}
		}
		return nil
	}
}

// PerfData is ClusterLoader2's performance data layout, read by perfdash:
// perf-tests clusterloader2/pkg/measurement/util/perftype.go (PerfData,
// DataItem) and latency_metric.go (LatencyMetric.ToPerfData: Perc50/90/99
// in "ms", labelled {"Metric": name}).
type PerfData struct {
	Version   string            `json:"version"`
	DataItems []DataItem        `json:"dataItems"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// DataItem is one PerfData data point.
type DataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels,omitempty"`
}

// NewPerfDataReporter renders every point and delta with samples as a
// PerfData item: Perc50, Perc90, Perc99 in ms, labels Metric and N.
func NewPerfDataReporter(s *Summary) Reporter {
	return func(w io.Writer) error {
		d := s.Doc()
		pd := PerfData{Version: "v1", DataItems: []DataItem{}}
		ms := func(ns int64) float64 { return float64(ns) / float64(time.Millisecond) }
		for _, x := range d.allDists() {
			if x.N == 0 {
				continue
			}
			pd.DataItems = append(pd.DataItems, DataItem{
				Data:   map[string]float64{"Perc50": ms(x.P50NS), "Perc90": ms(x.P90NS), "Perc99": ms(x.P99NS)},
				Unit:   "ms",
				Labels: map[string]string{"Metric": x.Name, "N": fmt.Sprint(x.N)},
			})
		}
		if h := s.Header; h != nil {
			pd.Labels = map[string]string{}
			for k, v := range map[string]string{
				"Cluster": h.Cluster, "ServerVersion": h.ServerVersion,
				"IngressController": h.Ingress.Controller, "IngressVersion": h.Ingress.Version,
			} {
				if v != "" {
					pd.Labels[k] = v
				}
			}
			if len(pd.Labels) == 0 {
				pd.Labels = nil
			}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(pd)
	}
}

// observerPart reads "observer skipper every 1s" or, with poll figures,
// "observer skipper every 1s, resolves 1.2s (poll p99 200ms, 3 overruns)".
func observerPart(o Observer) string {
	if o.IntervalNS == 0 {
		return fmt.Sprintf("observer %s every %s", o.Name, o.Resolution())
	}
	s := fmt.Sprintf("observer %s every %s, resolves %s (poll p99 %s", o.Name, time.Duration(o.IntervalNS),
		o.Resolution().Round(time.Millisecond), time.Duration(o.PollP99NS).Round(time.Millisecond))
	if o.Overruns > 0 {
		s += fmt.Sprintf(", %d over the interval", o.Overruns)
	}
	// The spacing kept is the interval give or take the ticker's jitter
	// unless the tracker backed off after an overrun: only then is it news.
	if sp := time.Duration(o.PollSpacingNS); sp > time.Duration(o.IntervalNS) && o.Overruns > 0 {
		s += fmt.Sprintf(", polls kept %s apart", sp.Round(time.Millisecond))
	}
	return s + ")"
}
