package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/results"
)

// Results files and golden reports of the results package, rendered there
// by the reporters themselves.
var resultsTestdata = filepath.Join("..", "..", "results", "testdata")

func testdata(name string) string { return filepath.Join(resultsTestdata, name) }

// TestReportRendersGolden: `epwindow report --format F` prints exactly the
// results package's golden report for F.
func TestReportRendersGolden(t *testing.T) {
	for format, golden := range map[string]string{
		"text": "report.txt", "markdown": "report.md", "json": "report.json", "csv": "report.csv", "perfdata": "report.perfdata.json",
	} {
		t.Run(format, func(t *testing.T) {
			out, err := runApp(t, "report", "--format", format, testdata("run.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(testdata(golden))
			if err != nil {
				t.Fatal(err)
			}
			if out != string(want) {
				t.Errorf("report --format %s differs from %s:\n%s", format, golden, out)
			}
		})
	}
	// The csv report is itself a results file: reporting it again gives
	// the same trials, hence the same table.
	csvOut, err := runApp(t, "report", "--format", "csv", testdata("run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.csv")
	if err := os.WriteFile(path, []byte(csvOut), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := runApp(t, "report", "--format", "csv", path)
	if err != nil || again != csvOut {
		t.Errorf("report of the csv report differs (err %v)", err)
	}
}

func TestReportPlot(t *testing.T) {
	out, err := runApp(t, "report", "--plot", testdata("run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	plot, err := os.ReadFile(testdata("report.plot.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, string(plot)) || !strings.Contains(out, "recommendation") {
		t.Errorf("report --plot is not the table followed by the plot:\n%s", out)
	}
}

func TestReportOptionsChangeRecommendation(t *testing.T) {
	out, err := runApp(t, "report", "--drain", "30s", "--deregistration-delay", "15s", "--headroom", "2s", testdata("run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deregistration_delay < preStop: 15.000s < preStop → 16s", "= 16s + 30.000s + 2.000s → 48s"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// envMainArgs makes TestExitCodes run main() itself with these arguments
// (JSON), so the test sees the exit status the shell would.
const envMainArgs = "EPWINDOW_TEST_MAIN_ARGS"

// TestExitCodes runs the real binary entry point (this test binary,
// re-executed into main()) and checks the documented exit codes.
func TestExitCodes(t *testing.T) {
	if js := os.Getenv(envMainArgs); js != "" {
		var args []string
		if err := json.Unmarshal([]byte(js), &args); err != nil {
			t.Fatal(err)
		}
		os.Args = append([]string{"epwindow"}, args...)
		main()
		os.Exit(0)
	}
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.jsonl")
	noValid := filepath.Join(dir, "novalid.jsonl")
	if err := os.WriteFile(garbage, []byte("{\"kind\":\"header\",\"schema\":1}\nnot json\n{\"kind\":\"trial\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(noValid, []byte(`{"kind":"header","schema":1}`+"\n"+`{"kind":"trial","trial":1,"valid":false,"invalid_reason":"watch broke"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run, base, intr := testdata("run.jsonl"), testdata("baseline.jsonl"), testdata("interrupted.jsonl")
	runBytes, err := os.ReadFile(run)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		stdin  []byte
		code   int
		stderr string
	}{
		{"report", []string{"report", run}, nil, exitOK, ""},
		{"report from stdin", []string{"report", "--format", "json", "-"}, runBytes, exitOK, ""},
		{"report of an interrupted run", []string{"report", intr}, nil, exitOK, "interrupted"},
		{"report without a file", []string{"report"}, nil, exitUsage, "want one results file"},
		{"report of a missing file", []string{"report", filepath.Join(dir, "nope.jsonl")}, nil, exitUsage, "no such file"},
		{"report of a malformed file", []string{"report", garbage}, nil, exitUsage, "line 2"},
		{"report --format yaml", []string{"report", "--format", "yaml", run}, nil, exitUsage, "--format"},
		{"report --plot with json", []string{"report", "--plot", "--format", "json", run}, nil, exitUsage, "--plot"},
		{"report --quantile 1.5", []string{"report", "--quantile", "1.5", run}, nil, exitUsage, "--quantile"},
		{"report --quantile 0", []string{"report", "--quantile", "0", run}, nil, exitUsage, "--quantile 0: want a fraction strictly between 0 and 1"},
		{"report --confidence 1", []string{"report", "--confidence", "1", run}, nil, exitUsage, "--confidence 1: want a fraction strictly between 0 and 1"},
		{"report --confidence -0.5", []string{"report", "--confidence", "-0.5", run}, nil, exitUsage, "--confidence"},
		{"report of a run cut at the hold", []string{"report", testdata("censored.jsonl")}, nil, exitOK, "only a lower bound (preStop ≥ 4s: the window's bound fell on a trial cut at the hold (10 of 20 trials)): rerun with --hold 8s"},
		{"report of too few trials", []string{"report", run}, nil, exitOK, "the largest of 18 trials covers 84.6% of deletions with 95% confidence: for 95% of deletions at 95% confidence rerun with --trials 59"},
		{"report of a skew fault", []string{"report", run}, nil, exitOK, "skew_bound ×1: --max-skew-uncertainty"},
		{"measure --quantile 1", []string{"measure", "--url", "http://127.0.0.1:1", "--quantile", "1"}, nil, exitUsage, "--quantile 1: want a fraction strictly between 0 and 1"},
		{"measure --confidence 0", []string{"measure", "--url", "http://127.0.0.1:1", "--confidence", "0"}, nil, exitUsage, "--confidence 0: want a fraction strictly between 0 and 1"},
		{"report unknown flag", []string{"report", "--bogus", run}, nil, exitUsage, "bogus"},
		{"compare", []string{"compare", base, run}, nil, exitOK, ""},
		{"compare under a generous p99 cap", []string{"compare", "--max-p99", "window=1h", base, run}, nil, exitOK, "all met"},
		{"compare over a p99 cap", []string{"compare", "--max-p99", "window=1s", base, run}, nil, exitThreshold, "max-p99: window"},
		{"compare with a regression", []string{"compare", "--max-regression", "20%", base, run}, nil, exitThreshold, "max-regression: upstream_removed"},
		{"compare a run with itself", []string{"compare", "--max-regression", "1%", run, run}, nil, exitOK, "all met"},
		{"compare an unknown stage", []string{"compare", "--max-p99", "windw=3s", base, run}, nil, exitUsage, "unknown metric"},
		{"compare a bad regression", []string{"compare", "--max-regression", "lots", base, run}, nil, exitUsage, "--max-regression"},
		{"compare one file", []string{"compare", run}, nil, exitUsage, "BASELINE and NEW"},
		{"compare with the new run on stdin", []string{"compare", "--max-p99", "window=1s", base, "-"}, runBytes, exitThreshold, "max-p99: window"},
		{"compare stdin with stdin", []string{"compare", "-", "-"}, runBytes, exitUsage, "only one"},
		{"compare without valid trials", []string{"compare", noValid, run}, nil, exitUsage, "no trial that measured the window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each case is a process of its own: they run side by side.
			t.Parallel()
			js, _ := json.Marshal(tt.args)
			cmd := exec.Command(os.Args[0], "-test.run=^TestExitCodes$")
			cmd.Env = append(os.Environ(), envMainArgs+"="+string(js))
			cmd.Stdin = bytes.NewReader(tt.stdin)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			// Messages are wrapped to 100 columns (stderr is no terminal
			// here): read them unwrapped, and none past the width.
			if code != tt.code || !strings.Contains(strings.ReplaceAll(stderr.String(), "\n  ", " "), tt.stderr) {
				t.Errorf("epwindow %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), code, stderr.String(), tt.code, tt.stderr)
			}
			for _, l := range strings.Split(stderr.String(), "\n") {
				if n := utf8.RuneCountInString(l); n > results.TextWidth && strings.HasPrefix(tt.args[0], "report") {
					t.Errorf("epwindow %s: a line of %d columns on stderr: %q", strings.Join(tt.args, " "), n, l)
				}
			}
		})
	}
}

// The in-process app returns the same codes (what measure's gate relies on).
func TestCompareExitCoder(t *testing.T) {
	_, err := runApp(t, "compare", "--max-p99", "window=1s", testdata("baseline.jsonl"), testdata("run.jsonl"))
	var ec cli.ExitCoder
	if !errors.As(err, &ec) || ec.ExitCode() != exitThreshold {
		t.Errorf("err = %v, want exit code %d", err, exitThreshold)
	}
}

// The waterfall from the command line: --format svg on standard output;
// --format markdown --svg writes the picture whole and links it; --svg
// without markdown is bad input naming both flags.
func TestReportWaterfall(t *testing.T) {
	out, err := runApp(t, "report", "--format", "svg", testdata("run.jsonl"))
	if err != nil || !strings.HasPrefix(out, "<?xml") || !strings.Contains(out, "Deletion waterfall") {
		t.Fatalf("report --format svg: %v\n%.200s", err, out)
	}
	pic := filepath.Join(t.TempDir(), "run.svg")
	out, err = runApp(t, "report", "--format", "markdown", "--svg", pic, testdata("run.jsonl"))
	if err != nil || !strings.Contains(out, "]("+pic+")") {
		t.Fatalf("report --format markdown --svg: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(pic); err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), "</svg>") {
		t.Errorf("the picture %s: %v, %d bytes, not a whole SVG", pic, err, len(b))
	}
	_, err = runApp(t, "report", "--svg", pic, testdata("run.jsonl"))
	if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), "--svg needs --format markdown") {
		t.Errorf("--svg without markdown: exit %d (%v), want %d naming the flags", code, err, exitUsage)
	}
}

// The HTML pages from the command line: a run's, a comparison's and a
// history's, each one self-contained document.
func TestHTMLFormats(t *testing.T) {
	dir := t.TempDir()
	for i := range 8 {
		writeHistoryRun(t, dir, i, "v1.37.2", 0)
	}
	for _, args := range [][]string{
		{"report", "--format", "html", testdata("run.jsonl")},
		{"compare", "--format", "html", testdata("baseline.jsonl"), testdata("run.jsonl")},
		{"history", "--format", "html", dir},
	} {
		out, err := runApp(t, args...)
		if err != nil || !strings.HasPrefix(out, "<!DOCTYPE html>") || !strings.Contains(out, "<svg") || strings.Contains(out, "<script") {
			t.Errorf("%v: %v, want a self-contained page with its picture:\n%.300s", args, err, out)
		}
	}
}
