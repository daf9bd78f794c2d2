package rerun

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/epwindow/epwindow/results"
)

// Both real results files render in every format report offers, and the
// machine-readable ones parse back to what the file holds. The reports are
// kept in the test log (go test -v), not as golden files: measured numbers
// differ on every run.
func TestReportEveryFormat(t *testing.T) {
	for _, r := range []run{base, slow} {
		t.Run("poll "+r.poll.String(), func(t *testing.T) {
			f, err := os.Open(r.path)
			if err != nil {
				t.Fatal(err)
			}
			file, err := results.Decode(f)
			f.Close()
			if err != nil {
				t.Fatalf("decode %s: %v", r.path, err)
			}
			// measure runs on until --trials trials have a valid window.
			if len(file.Trials) < trials {
				t.Fatalf("%s holds %d trials, want at least %d", r.path, len(file.Trials), trials)
			}
			valid := 0
			for _, tr := range file.Trials {
				if tr.Valid {
					valid++
				} else {
					t.Logf("trial %d invalid: %s", tr.Trial, tr.Invalid)
				}
			}
			t.Logf("epwindow measure's own output:\n%s", r.output)

			for _, format := range results.ReporterNames() {
				t.Run(format, func(t *testing.T) {
					out := report(t, r.path, "--format", format)
					t.Logf("epwindow report --format %s (--ingress-poll %s):\n%s", format, r.poll, out)
					switch format {
					case "json":
						checkJSON(t, out, len(file.Trials), valid)
					case "csv":
						checkCSV(t, out, file)
					case "perfdata":
						checkPerfData(t, out, valid)
					case "markdown":
						// The section a platform team pastes: the
						// recommendation with both settings.
						for _, want := range []string{"preStop", "terminationGracePeriodSeconds", results.StageUpstreamRemoved} {
							if !strings.Contains(out, want) {
								t.Errorf("markdown report does not mention %q", want)
							}
						}
					case "text":
						for _, want := range []string{results.StageSliceNotReady, results.StageUpstreamRemoved, results.PointWindow} {
							if !strings.Contains(out, want) {
								t.Errorf("text report has no row for %q", want)
							}
						}
					}
				})
			}

			t.Run("plot", func(t *testing.T) {
				text := report(t, r.path)
				out := report(t, r.path, "--plot")
				t.Logf("epwindow report --plot (--ingress-poll %s):\n%s", r.poll, out)
				charts, ok := strings.CutPrefix(out, text)
				if !ok || strings.TrimSpace(charts) == "" {
					t.Fatalf("--plot output is not the text report followed by charts")
				}
				// results.PlotWidth promises charts readable at 80 columns.
				for i, line := range strings.Split(charts, "\n") {
					if n := utf8.RuneCountInString(line); n > 80 {
						t.Errorf("chart line %d is %d columns wide, want ≤ 80: %q", i+1, n, line)
					}
				}
			})
		})
	}
}

// report runs epwindow report on path and returns its standard output, which
// must not be empty.
func report(t *testing.T, path string, args ...string) string {
	t.Helper()
	stdout, stderr, code := epwindow(t, append(append([]string{"report"}, args...), path)...)
	if code != 0 {
		t.Fatalf("report %v exited %d; stderr:\n%s", args, code, stderr)
	}
	if strings.TrimSpace(stdout) == "" {
		t.Fatalf("report %v printed nothing; stderr:\n%s", args, stderr)
	}
	return stdout
}

// checkJSON: the summary counts the file's trials, and every valid trial
// has a window.
func checkJSON(t *testing.T, out string, all, valid int) {
	t.Helper()
	var doc results.JSONReport
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("json report does not decode: %v", err)
	}
	if doc.Summary == nil {
		t.Fatal("json report has no summary")
	}
	if doc.Summary.Trials != all || doc.Summary.Valid != valid {
		t.Errorf("json summary counts %d trials, %d valid; the file holds %d, %d valid", doc.Summary.Trials, doc.Summary.Valid, all, valid)
	}
	found := false
	for _, d := range doc.Summary.Stages {
		if d.Name == results.PointWindow {
			found = true
			if d.N != valid {
				t.Errorf("json summary: window has n=%d, want every valid trial (%d)", d.N, valid)
			}
		}
	}
	if !found {
		t.Errorf("json summary has no %q stage", results.PointWindow)
	}
	if doc.Header == nil {
		t.Error("json report has no header (cluster, controller, settings)")
	}
}

// checkCSV: a rectangular table with a header, which results.Decode reads
// back into the same trials.
func checkCSV(t *testing.T, out string, file *results.File) {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("csv report does not parse: %v", err)
	}
	if len(rows) < 2 || rows[0][0] != "trial" {
		t.Fatalf("csv report: want a header starting with \"trial\" and rows, got %d rows", len(rows))
	}
	back, err := results.Decode(bytes.NewReader([]byte(out)))
	if err != nil {
		t.Fatalf("csv report does not decode as a results file: %v", err)
	}
	if len(back.Trials) != len(file.Trials) {
		t.Fatalf("csv report decodes to %d trials, the file holds %d", len(back.Trials), len(file.Trials))
	}
	for i := range back.Trials {
		got, want := back.Trials[i], file.Trials[i]
		if got.Trial != want.Trial || got.Valid != want.Valid || len(got.Stages) != len(want.Stages) {
			t.Errorf("csv trial %d: trial %d valid %t with %d stages, want trial %d valid %t with %d stages",
				i+1, got.Trial, got.Valid, len(got.Stages), want.Trial, want.Valid, len(want.Stages))
			continue
		}
		for j := range got.Stages {
			if got.Stages[j].Name != want.Stages[j].Name || got.Stages[j].OffsetNS != want.Stages[j].OffsetNS {
				t.Errorf("csv trial %d stage %d: %s at %d ns, want %s at %d ns", got.Trial, j,
					got.Stages[j].Name, got.Stages[j].OffsetNS, want.Stages[j].Name, want.Stages[j].OffsetNS)
			}
		}
	}
}

// checkPerfData: ClusterLoader2's layout, one item per metric with ordered
// percentiles in ms, and upstream_removed measured in every valid trial.
func checkPerfData(t *testing.T, out string, valid int) {
	t.Helper()
	var pd results.PerfData
	if err := json.Unmarshal([]byte(out), &pd); err != nil {
		t.Fatalf("perfdata report does not decode: %v", err)
	}
	if pd.Version == "" || len(pd.DataItems) == 0 {
		t.Fatalf("perfdata report: version %q, %d data items; want a version and items", pd.Version, len(pd.DataItems))
	}
	found := false
	for _, it := range pd.DataItems {
		p50, ok50 := it.Data["Perc50"]
		p90, ok90 := it.Data["Perc90"]
		p99, ok99 := it.Data["Perc99"]
		if !ok50 || !ok90 || !ok99 || it.Unit != "ms" || it.Labels["Metric"] == "" {
			t.Errorf("perfdata item %+v: want Perc50/90/99 in ms and a Metric label", it)
			continue
		}
		if p50 > p90 || p90 > p99 {
			t.Errorf("perfdata %s: Perc50 %g, Perc90 %g, Perc99 %g are out of order", it.Labels["Metric"], p50, p90, p99)
		}
		if it.Labels["Metric"] == results.StageUpstreamRemoved {
			found = true
			if n, _ := strconv.Atoi(it.Labels["N"]); n != valid {
				t.Errorf("perfdata %s: N=%s, want every valid trial (%d)", results.StageUpstreamRemoved, it.Labels["N"], valid)
			}
		}
	}
	if !found {
		t.Errorf("perfdata has no %s item", results.StageUpstreamRemoved)
	}
}
