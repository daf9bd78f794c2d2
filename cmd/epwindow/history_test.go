package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// writeHistoryRun writes testdata's run.jsonl into dir as run i of a
// history: started i·6 h after the first, on Kubernetes version, every
// trial's traffic end later by slow.
func writeHistoryRun(t *testing.T, dir string, i int, version string, slow time.Duration) {
	t.Helper()
	writeRunFile(t, filepath.Join(dir, fmt.Sprintf("run-%03d.jsonl", i)), historyStart.Add(time.Duration(i)*6*time.Hour), version, 0,
		func(int) time.Duration { return slow })
}

// historyStart is when the first run of a test history started.
var historyStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// writeRunFile writes testdata's run.jsonl to path as a run started at
// start on Kubernetes version, its first trials trials (0: all 18), each
// trial's traffic end later by slow(trial number).
func writeRunFile(t testing.TB, path string, start time.Time, version string, trials int, slow func(trial int) time.Duration) {
	t.Helper()
	data, err := os.ReadFile(testdata("run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		switch m["kind"] {
		case "header":
			m["server_version"] = version
			m["started_at"] = start.Format(time.RFC3339Nano)
		case "trial":
			n := int(m["trial"].(float64))
			if trials > 0 && n > trials {
				continue
			}
			d := slow(n)
			for _, st := range m["stages"].([]any) {
				s := st.(map[string]any)
				if n := s["name"]; n == "last_request" || n == "last_accept" {
					s["offset_ns"] = s["offset_ns"].(float64) + float64(d)
					at, _ := time.Parse(time.RFC3339Nano, s["at"].(string))
					s["at"] = at.Add(d).Format(time.RFC3339Nano)
				}
			}
		}
		b, _ := json.Marshal(m)
		out = append(out, string(b))
	}
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A history of 8 runs of 18 windows each: the first 7 (126 trials) fill
// the reference, the newest is judged against it. Made 30 s slower it is
// suspect, not yet worse (the alarm needs a confirmation on the trials
// after it: 30 of them, two more slow runs); confirmed, it is worse, and
// --fail-on-worse exits 3. A Kubernetes upgrade starts a new segment whose
// runs are not judged until its reference fills.
func TestHistory(t *testing.T) {
	dir := t.TempDir()
	for i := range 8 {
		writeHistoryRun(t, dir, i, "v1.37.2", 0)
	}
	out, err := runApp(t, "history", dir)
	if err != nil || !strings.Contains(out, "newest run run-007.jsonl: window same") {
		t.Errorf("history of like runs: %v\n%s", err, out)
	}
	writeHistoryRun(t, dir, 8, "v1.37.2", 30*time.Second)
	out, err = runApp(t, "history", "--fail-on-worse", dir)
	if err != nil || !strings.Contains(out, "newest run run-008.jsonl: window suspect: the newest 36 trials against 72 of the reference") {
		t.Errorf("history with one slow run: %v, want it suspect and exit 0\n%s", err, out)
	}
	writeHistoryRun(t, dir, 9, "v1.37.2", 30*time.Second)
	writeHistoryRun(t, dir, 10, "v1.37.2", 30*time.Second)
	out, err = runApp(t, "history", "--fail-on-worse", dir)
	if code := exitCode(err); code != exitThreshold || !strings.Contains(out, "newest run run-010.jsonl: window worse: seen at run-008.jsonl, confirmed at run-010.jsonl") || !strings.Contains(out, "window: worse") {
		t.Errorf("history with three slow runs: exit %d (%v), want %d and the window worse\n%s", code, err, exitThreshold, out)
	}
	writeHistoryRun(t, dir, 11, "v1.38.0", 0)
	out, err = runApp(t, "history", "--fail-on-worse", dir)
	if err != nil || !strings.Contains(out, "changed: kubernetes: v1.37.2 → v1.38.0") || !strings.Contains(out, "not judged: the baseline needs 102 trials more") {
		t.Errorf("history after an upgrade: %v, want the change named and the newest run not judged\n%s", err, out)
	}
}

func TestHistoryBadInput(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"history"}, "want a history folder"},
		{[]string{"history", empty}, "holds no results file"},
		{[]string{"history", filepath.Join(empty, "nope")}, "no such file"},
		{[]string{"history", "--baseline-trials", "0", empty}, "--baseline-trials 0"},
		{[]string{"history", "--format", "yaml", empty}, "--format"},
		{[]string{"history", "--serve", ":0", "--expect-run-every", "-1h", empty}, "--expect-run-every"},
	} {
		_, err := runApp(t, tc.args...)
		if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: exit %d (%v), want %d saying %q", tc.args, code, err, exitUsage, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the app's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// --serve: the history's metrics in OpenMetrics on /metrics, read again
// every --refresh: it starts on a folder the schedule has not written yet
// (a fresh deployment), picks up the runs as they come, and a slow run added
// to the folder turns the verdict worse on a later scrape. The command
// stops cleanly with its context.
func TestHistoryServe(t *testing.T) {
	dir := t.TempDir()
	var out, errOut syncBuffer
	app := newApp("epwindow")
	app.Writer, app.ErrWriter = &out, &errOut
	app.ExitErrHandler = func(*cli.Context, error) {}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runCLI(ctx, app, []string{"epwindow", "history", "--serve", "127.0.0.1:0", "--refresh", "50ms", "--documented-prestop", "5s", "--expect-run-every", "6h", dir})
	}()
	addr := regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)
	scrape := func(want string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var body string
			if m := addr.FindStringSubmatch(errOut.String()); m != nil {
				req, _ := http.NewRequest(http.MethodGet, m[1], nil)
				req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					body = string(b)
					if strings.Contains(body, want) {
						return body
					}
				}
			}
			select {
			case err := <-done:
				t.Fatalf("history --serve ended: %v\n%s", err, errOut.String())
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the metrics within 20 s:\n%s\nstderr:\n%s", want, body, errOut.String())
			}
		}
	}
	// Before the first run: the server's start stands for the newest
	// trial, so that a schedule that never measures is alerted on.
	body := scrape("epwindow_history_runs 0")
	for _, want := range []string{"epwindow_expected_run_interval_seconds 21600", "epwindow_last_trial_timestamp_seconds "} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	for i := range 8 {
		writeHistoryRun(t, dir, i, "v1.37.2", 0)
	}
	body = scrape(`epwindow_drift_verdict{verdict="same"} 1`)
	for _, want := range []string{"# EOF", "epwindow_documented_prestop_seconds 5", `epwindow_stage_seconds_bucket{stage="window",le="3.0"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	writeHistoryRun(t, dir, 8, "v1.37.2", 30*time.Second)
	scrape(`epwindow_drift_verdict{verdict="suspect"} 1`)
	writeHistoryRun(t, dir, 9, "v1.37.2", 30*time.Second)
	writeHistoryRun(t, dir, 10, "v1.37.2", 30*time.Second)
	scrape(`epwindow_drift_verdict{verdict="worse"} 1`)
	// A stray file is skipped, counted and warned about once, though the
	// folder is read every 50 ms.
	if err := os.WriteFile(filepath.Join(dir, "notes.jsonl"), []byte("rerun after the upgrade\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	body = scrape(`epwindow_history_skipped_files{reason="invalid"} 1`)
	for _, want := range []string{`epwindow_drift_verdict{verdict="worse"} 1`, "epwindow_history_refresh_interval_seconds 0.05", "epwindow_history_last_read_success_timestamp_seconds "} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	read := regexp.MustCompile(`(?m)^epwindow_history_last_read_success_timestamp_seconds (\S+)`)
	first := read.FindStringSubmatch(body)
	for deadline := time.Now().Add(10 * time.Second); ; { // a later read
		if m := read.FindStringSubmatch(scrape("epwindow_history_runs 11")); first == nil || m == nil || m[1] != first[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the history was not read again within 10 s")
		}
	}
	if n := strings.Count(errOut.String(), "notes.jsonl"); n != 1 {
		t.Errorf("notes.jsonl warned about %d times, want once:\n%s", n, errOut.String())
	}
	// The folder gone (a volume unmounted): the reads fail and are
	// counted, the last state is served, and its read time stays.
	if err := os.Rename(dir, dir+".gone"); err != nil {
		t.Fatal(err)
	}
	before := read.FindStringSubmatch(scrape("epwindow_history_read_errors_total 1"))
	body = scrape("epwindow_history_read_errors_total 3")
	if after := read.FindStringSubmatch(body); before == nil || after == nil || before[1] != after[1] || !strings.Contains(body, `epwindow_drift_verdict{verdict="worse"} 1`) {
		t.Errorf("with the folder gone the last read's state and time should stay: read at %v then %v\n%s", before, after, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("history --serve stopped with %v, want a clean stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("history --serve did not stop with its context")
	}
}

// For platform docs: markdown with the chart it links, written as an SVG
// (from history, and from report given the folder); the chart and a
// history without markdown are refused with the flag named.
func TestHistoryMarkdownChart(t *testing.T) {
	dir := t.TempDir()
	for i := range 8 {
		writeHistoryRun(t, dir, i, "v1.37.2", 0)
	}
	for _, cmd := range []string{"history", "report"} {
		chart := filepath.Join(t.TempDir(), "trend.svg")
		out, err := runApp(t, cmd, "--format", "markdown", "--chart", chart, dir)
		if err != nil {
			t.Fatalf("%s --format markdown: %v", cmd, err)
		}
		for _, want := range []string{"## Propagation window over time", "![The window's upper bound and median per run](" + chart + ")",
			"| drift | same: the newest 18 trials against 72 of the reference |", "| preStop | "} {
			if !strings.Contains(out, want) {
				t.Errorf("%s markdown lacks %q:\n%s", cmd, want, out)
			}
		}
		svg, err := os.ReadFile(chart)
		if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("Propagation window per scheduled run")) {
			t.Errorf("%s --chart: %v, not an SVG chart:\n%.300s", cmd, err, svg)
		}
	}
	_, err := runApp(t, "history", "--chart", filepath.Join(t.TempDir(), "x.svg"), dir)
	if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), "--chart needs --format markdown") {
		t.Errorf("--chart without markdown: exit %d (%v)", code, err)
	}
	_, err = runApp(t, "report", "--chart", "x.svg", testdata("run.jsonl"))
	if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), "--chart") {
		t.Errorf("report --chart of one file: exit %d (%v)", code, err)
	}
}
