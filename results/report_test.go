package results

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite testdata/ (inputs from the synthetic generator, and golden outputs)")

// The golden inputs: a finished run, the baseline it is compared with (a
// faster ingress poll), and an interrupted run.
var goldenInputs = map[string]struct {
	spec      synthSpec
	summary   bool
	cutLastAt int // bytes cut off the end
}{
	"run.jsonl": {spec: synthSpec{seed: 1, trials: 20, poll: 3 * time.Second, invalid: map[int]Reason{
		4:  {Code: ReasonProbeUnreadable, Detail: "the probe's record could not be read (pod proxy and termination message): connection refused"},
		11: {Code: ReasonSkewBound, Detail: "clock-skew bound ±60ms exceeds the 50ms allowed"},
		15: {Code: ReasonWatchBroken, Detail: "the endpointslices watch broke at 2026-11-29T18:07:30.2Z: too old resource version"},
	}}, summary: true},
	// a poll longer than the hold: the slowest trials are cut
	"censored.jsonl":    {spec: synthSpec{seed: 4, trials: 20, poll: 3 * time.Second, hold: 2500 * time.Millisecond}, summary: true},
	"baseline.jsonl":    {spec: synthSpec{seed: 2, trials: 20, poll: time.Second}, summary: true},
	"interrupted.jsonl": {spec: synthSpec{seed: 3, trials: 6, poll: 3 * time.Second, noPrestop: true}, cutLastAt: 37},
}

func writeInputs(t *testing.T) {
	for name, in := range goldenInputs {
		var sum *SummaryDoc
		if in.summary {
			sum = synthSummary(in.spec).Doc()
		}
		b := writeRun(t, synthHeader(in.spec), synthTrials(in.spec), sum)
		b = b[:len(b)-in.cutLastAt]
		if err := os.WriteFile(filepath.Join("testdata", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func load(t *testing.T, name string) *Summary {
	t.Helper()
	fh, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("%v (run go test ./results -update to create it)", err)
	}
	defer fh.Close()
	f, err := Decode(fh)
	if err != nil {
		t.Fatal(err)
	}
	return Summarize(f, Options{})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./results -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run go test ./results -update if the change is intended):\n--- got\n%s", name, got)
	}
}

func TestGoldenReports(t *testing.T) {
	if *update {
		writeInputs(t)
	}
	run := load(t, "run.jsonl")
	cases := map[string]Reporter{
		"report.txt":           NewTextReporter(run),
		"report.wide.txt":      NewTextReporterWidth(run, 0),
		"report.narrow.txt":    NewTextReporterWidth(run, 80),
		"report.md":            NewMarkdownReporter(run),
		"report.json":          NewJSONReporter(run),
		"report.csv":           NewCSVReporter(run),
		"report.perfdata.json": NewPerfDataReporter(run),
		"report.plot.txt":      NewPlotReporter(run),
		"interrupted.txt":      NewTextReporter(load(t, "interrupted.jsonl")),
		"censored.txt":         NewTextReporter(load(t, "censored.jsonl")),
		"v1.txt":               NewTextReporter(load(t, "v1.jsonl")),
	}
	cmp := Compare(load(t, "baseline.jsonl"), run, CompareOptions{})
	cases["compare.txt"] = NewCompareTextReporter(cmp)
	cases["compare.json"] = NewCompareJSONReporter(cmp)
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := r(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, name, buf.Bytes())
		})
	}
}

// The same file renders the same report: the bootstrap is seeded.
func TestReportDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if err := NewTextReporter(load(t, "run.jsonl"))(&a); err != nil {
		t.Fatal(err)
	}
	if err := NewTextReporter(load(t, "run.jsonl"))(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two renderings of one file differ")
	}
}

func TestReportSaysInterrupted(t *testing.T) {
	var buf bytes.Buffer
	if err := NewTextReporter(load(t, "interrupted.jsonl"))(&buf); err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(buf.String()), " ") // caveats are wrapped
	for _, want := range []string{"INTERRUPTED", "5 trials", "runs from SIGTERM instead of prestop_called"} {
		if !strings.Contains(flat, want) {
			t.Errorf("interrupted report lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestPlotFits80Columns(t *testing.T) {
	for _, n := range []int{2, 20, 200} {
		s := synthSummary(synthSpec{seed: 9, trials: n, poll: 3 * time.Second})
		var buf bytes.Buffer
		if err := NewPlotReporter(s)(&buf); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), "\x1b[") {
			t.Errorf("n=%d: the plot carries ANSI escapes", n)
		}
		for i, line := range strings.Split(buf.String(), "\n") {
			if w := utf8.RuneCountInString(line); w > 80 {
				t.Errorf("n=%d line %d is %d columns: %q", n, i+1, w, line)
			}
		}
		if !strings.Contains(buf.String(), "CDF of the window") || !strings.Contains(buf.String(), "per trial") {
			t.Errorf("n=%d: plot lacks a chart:\n%s", n, buf.String())
		}
	}
}

// PerfData as ClusterLoader2 writes it: version, dataItems with Perc50/90/99
// in ms and a Metric label.
func TestPerfDataLayout(t *testing.T) {
	s := synthSummary(synthSpec{seed: 1, trials: 20, poll: time.Second})
	var buf bytes.Buffer
	if err := NewPerfDataReporter(s)(&buf); err != nil {
		t.Fatal(err)
	}
	var pd PerfData
	if err := jsonUnmarshalStrict(buf.Bytes(), &pd); err != nil {
		t.Fatal(err)
	}
	w, _ := s.Dist(PointWindow)
	found := false
	for _, it := range pd.DataItems {
		if it.Unit != "ms" || len(it.Data) != 3 || it.Labels["Metric"] == "" {
			t.Errorf("item %+v: want unit ms, Perc50/90/99 and a Metric label", it)
		}
		if it.Labels["Metric"] == PointWindow {
			found = true
			if it.Data["Perc99"] != float64(w.P99NS)/1e6 || it.Data["Perc50"] != float64(w.P50NS)/1e6 {
				t.Errorf("window item %v, want p50 %v p99 %v ms", it.Data, float64(w.P50NS)/1e6, float64(w.P99NS)/1e6)
			}
		}
	}
	if pd.Version != "v1" || !found {
		t.Errorf("version %q, window item found %v", pd.Version, found)
	}
}

// An explicit --observer leaves the IngressClass's controller unread: the
// run line names the class alone, without a gap where the name would be.
func TestRunLineWithoutController(t *testing.T) {
	got := strings.Join(runLine(&Header{Ingress: Ingress{Class: "skipper"}}), "\n")
	if !strings.Contains(got, "ingress (class skipper)") {
		t.Errorf("run line %q, want it to contain %q", got, "ingress (class skipper)")
	}
}

// An HTTPRoute run names its Gateway, class and controller where an
// Ingress run names its class, in the text report's header lines and the
// Markdown title.
func TestRunLineHTTPRoute(t *testing.T) {
	h := &Header{Ingress: Ingress{Version: "v3.6.12"}, Route: Route{Kind: RouteKindHTTPRoute, Gateway: "gw/traefik/web",
		GatewayClass: "traefik", Controller: "traefik.io/gateway-controller"}}
	got := strings.Join(runLine(h), "\n")
	want := "HTTPRoute on Gateway gw/traefik/web (class traefik, controller traefik.io/gateway-controller v3.6.12)"
	if !strings.Contains(got, want) {
		t.Errorf("run line %q, want it to contain %q", got, want)
	}
	if strings.Contains(got, "ingress") {
		t.Errorf("run line %q names an ingress", got)
	}
	sum := NewSummary(h, Options{})
	sum.Close()
	var b strings.Builder
	if err := NewMarkdownReporter(sum)(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "through traefik.io/gateway-controller v3.6.12") {
		t.Errorf("markdown title does not name the Gateway's controller:\n%s", b.String()[:min(b.Len(), 300)])
	}
	// Older files have no route: an Ingress, rendered as before.
	if got := strings.Join(runLine(&Header{Ingress: Ingress{Class: "nginx", Controller: "k8s.io/ingress-nginx"}}), "\n"); !strings.Contains(got, "ingress k8s.io/ingress-nginx (class nginx)") {
		t.Errorf("run line %q", got)
	}
}

// A recommendation that is only a floor says so where it is pasted from:
// both YAML settings carry "# at least: rerun with --hold …", and the claim
// line reads "at least".
func TestMarkdownMarksFloor(t *testing.T) {
	s := load(t, "censored.jsonl")
	var b strings.Builder
	if err := NewMarkdownReporter(s)(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if n := strings.Count(md, "# at least: rerun with --hold 8s"); n != 2 {
		t.Errorf("%d YAML lines marked as floors, want 2:\n%s", n, md)
	}
	if !strings.Contains(md, "U: at least ") {
		t.Errorf("the claim line does not say \"at least\":\n%s", md)
	}
	b.Reset()
	if err := NewMarkdownReporter(load(t, "run.jsonl"))(&b); err != nil || strings.Contains(b.String(), "at least:") {
		t.Errorf("a measured recommendation is marked as a floor (err %v)", err)
	}
}

// A controller named by the observer (an explicit --observer reads no
// IngressClass) shows with its version, or with why there is none, in the
// text header lines and the Markdown title; the note survives the file.
func TestRunLineVersionNote(t *testing.T) {
	for _, tc := range []struct {
		in          Ingress
		line, title string
	}{
		{Ingress{Class: "skipper", Controller: "skipper", VersionNote: "not exposed"},
			"ingress skipper, version not exposed (class skipper)", "through skipper (version not exposed)\n"},
		{Ingress{Class: "skipper", Controller: "skipper", Version: "v0.27.57", VersionNote: "ignored when a version is known"},
			"ingress skipper v0.27.57 (class skipper)", "through skipper v0.27.57\n"},
		{Ingress{Class: "traefik", Controller: "traefik"},
			"ingress traefik (class traefik)", "through traefik\n"},
	} {
		h := &Header{Ingress: tc.in}
		if got := strings.Join(runLine(h), "\n"); !strings.Contains(got, tc.line) {
			t.Errorf("run line %q, want it to contain %q", got, tc.line)
		}
		var b bytes.Buffer
		w := NewWriter(&b)
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		f, err := Decode(&b)
		if err != nil {
			t.Fatal(err)
		}
		if f.Header.Ingress.VersionNote != tc.in.VersionNote {
			t.Errorf("version note %q after the file, want %q", f.Header.Ingress.VersionNote, tc.in.VersionNote)
		}
		sum := NewSummary(f.Header, Options{})
		sum.Close()
		var md strings.Builder
		if err := NewMarkdownReporter(sum)(&md); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(md.String(), tc.title) {
			t.Errorf("markdown title %q, want it to contain %q", strings.SplitN(md.String(), "\n", 2)[0], tc.title)
		}
	}
}

// Every line of the text report fits its width: the tables fit
// themselves, and the prose (footnotes, legends, their continuation lines
// indented two columns) wraps inside the same width.
func TestTextReportFitsItsWidth(t *testing.T) {
	for _, name := range []string{"run.jsonl", "censored.jsonl", "interrupted.jsonl", "v1.jsonl"} {
		s := load(t, name)
		for _, width := range []int{80, 100} {
			var b strings.Builder
			if err := NewTextReporterWidth(s, width)(&b); err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(b.String(), "\n") {
				if n := utf8.RuneCountInString(l); n > width && !strings.Contains(strings.TrimLeft(l, " "), "  ") {
					t.Errorf("%s at %d columns: a line of prose of %d: %q", name, width, n, l)
				}
			}
		}
	}
}

// FitLines wraps prose past the width under its own indent, and leaves
// table rows (padded columns) and lines that fit alone.
func TestFitLines(t *testing.T) {
	in := "Long-lived connections (websocket, through the ingress-nginx-controller.ingress-nginx.svc.cluster.local ingress, --stream-drain 30s)\n" +
		"  stage                      n       p50       p90       max     bound\n" +
		"short line"
	got := FitLines(in, 60)
	want := "Long-lived connections (websocket, through the\n" +
		"  ingress-nginx-controller.ingress-nginx.svc.cluster.local\n" +
		"  ingress, --stream-drain 30s)\n" +
		"  stage                      n       p50       p90       max     bound\n" +
		"short line"
	if got != want {
		t.Errorf("FitLines:\n%s\nwant:\n%s", got, want)
	}
}

// The waterfall of a run, as a golden SVG (deterministic for one input),
// within 200 kB for 60 trials, its text at least 10 px.
func TestWaterfallSVG(t *testing.T) {
	var b bytes.Buffer
	if err := WriteWaterfallSVG(&b, load(t, "run.jsonl")); err != nil {
		t.Fatal(err)
	}
	golden(t, "run.waterfall.svg", b.Bytes())
	var again bytes.Buffer
	if err := WriteWaterfallSVG(&again, load(t, "run.jsonl")); err != nil || !bytes.Equal(again.Bytes(), b.Bytes()) {
		t.Errorf("a second drawing of the same run differs (%v)", err)
	}
}

// The waterfall at the sizes people run and beyond: 60 trials within
// 200 kB, every text at least 10 px; 1,000 trials thinned to
// WaterfallLanes lanes with a note saying so; a run without a trial is an
// error, not a broken file.
func TestWaterfallSizes(t *testing.T) {
	for _, n := range []int{60, 1000} {
		spec := synthSpec{seed: uint64(n), trials: n, poll: 3 * time.Second}
		s := NewSummary(synthHeader(spec), Options{})
		for _, r := range synthTrials(spec) {
			s.Add(&r)
		}
		s.Close()
		var b bytes.Buffer
		if err := WriteWaterfallSVG(&b, s); err != nil {
			t.Fatal(err)
		}
		svg := b.String()
		t.Logf("%d trials: %d bytes", n, b.Len())
		if n == 60 && b.Len() > 200<<10 {
			t.Errorf("%d trials: %d bytes, want at most 200 kB", n, b.Len())
		}
		if strings.Contains(svg, fmt.Sprintf("%d of %d trials", WaterfallLanes, n)) != (n > WaterfallLanes) {
			t.Errorf("%d trials: the thinning note is missing or out of place", n)
		}
		for _, m := range regexp.MustCompile(`font-size:([0-9.]+)px`).FindAllStringSubmatch(svg, -1) {
			if v, _ := strconv.ParseFloat(m[1], 64); v < 10 {
				t.Errorf("%d trials: text of %spx, want at least 10", n, m[1])
			}
		}
		if !strings.HasSuffix(strings.TrimSpace(svg), "</svg>") {
			t.Errorf("%d trials: the SVG is not closed", n)
		}
	}
	// A run none of whose trials measured the window: the lanes it has,
	// and the CDF saying there is none, not a broken file.
	spec := synthSpec{seed: 7, trials: 5, poll: time.Second}
	s := NewSummary(synthHeader(spec), Options{})
	for _, r := range synthTrials(spec) {
		r.Valid, r.Reasons = false, []Reason{{Code: ReasonSkewMissing, Detail: "test"}}
		s.Add(&r)
	}
	s.Close()
	var nv bytes.Buffer
	if err := WriteWaterfallSVG(&nv, s); err != nil || !strings.Contains(nv.String(), "no trial measured the window") || !strings.HasSuffix(strings.TrimSpace(nv.String()), "</svg>") {
		t.Errorf("a run without a valid trial: %v, want a whole picture saying so", err)
	}
	empty := NewSummary(&Header{}, Options{})
	empty.Close()
	var b bytes.Buffer
	if err := WriteWaterfallSVG(&b, empty); err != nil || !strings.Contains(b.String(), "no trial to draw") || !strings.HasSuffix(strings.TrimSpace(b.String()), "</svg>") {
		t.Errorf("a run without trials: %v, want a whole picture saying so:\n%s", err, b.String())
	}
}

// The HTML report is one self-contained page: no script, no external URL
// (the inline SVG keeps no namespace URIs), the picture inline, and the
// numbers the text report prints: the recommended preStop and each
// stage's p50.
func TestHTMLReport(t *testing.T) {
	s := load(t, "run.jsonl")
	var b bytes.Buffer
	if err := NewHTMLReporter(s)(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	checkSelfContained(t, "run", page)
	r := s.Doc().Recommendation
	if !strings.Contains(page, fmt.Sprintf("seconds: %d", r.PreStopSeconds)) || !strings.Contains(page, "<svg") {
		t.Errorf("the page lacks the recommendation or the picture")
	}
	for _, d := range s.Doc().Stages {
		if !strings.Contains(page, "<td>"+cell(d, d.P50NS, 0.5)+"</td>") {
			t.Errorf("the page lacks %s's p50 %s", d.Name, cell(d, d.P50NS, 0.5))
		}
	}
	c := Compare(load(t, "baseline.jsonl"), s, CompareOptions{})
	b.Reset()
	if err := NewCompareHTMLReporter(c, load(t, "baseline.jsonl"), s)(&b); err != nil {
		t.Fatal(err)
	}
	checkSelfContained(t, "compare", b.String())
	if strings.Count(b.String(), "<svg") != 2 {
		t.Errorf("the comparison's page does not draw both runs")
	}
}

func checkSelfContained(t *testing.T, name, page string) {
	t.Helper()
	for _, bad := range []string{"<script", "http://", "https://", "src="} {
		if strings.Contains(page, bad) {
			t.Errorf("%s page holds %q: not self-contained", name, bad)
		}
	}
	if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.HasSuffix(strings.TrimSpace(page), "</html>") {
		t.Errorf("%s page is not a whole HTML document", name)
	}
}
