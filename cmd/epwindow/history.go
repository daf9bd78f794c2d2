package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/results"
)

// Flags of history.
const (
	flagBaselineTrials = "baseline-trials"
	flagWindowTrials   = "window-trials"
	flagFailOnWorse    = "fail-on-worse"
)

func historyCommand() *cli.Command {
	return &cli.Command{
		Name:      "history",
		Usage:     "judge the newest of a history of runs against the pooled runs before it; exit 3 with --fail-on-worse",
		ArgsUsage: "DIR|RESULTS...",
		UsageText: `epwindow history /var/lib/epwindow/history
   epwindow history --fail-on-worse --baseline-trials 120 runs/*.jsonl`,
		Description: `Reads every results file of a history (a folder's *.jsonl, or the files named), in the order
the runs started, and splits it where the settings that shape the window changed (Kubernetes
version, ingress controller, its version and settings, route, observers, hold): runs of different
settings are never pooled, and the report names the change. In the newest segment each run is
judged as a scheduled run is: its window pools the newest runs up to --window-trials trials, against
a baseline of the --baseline-trials before them (compare's tests on the window); once a run is
worse, the baseline stays before that change, so a lasting regression stays reported. 120 trials a
side catch a +30 s slow mode in 10% of deletions within a few runs of 10 trials (docs/compare.md).
Exit codes: 0 judged (or not yet judgeable), 2 bad input, 3 the newest run is worse and
--fail-on-worse is set.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagFormat, Value: "text", Usage: "text or json"},
			wideFlag(),
			&cli.IntFlag{Name: flagBaselineTrials, Value: results.DefaultBaselineTrials, Usage: "trials the baseline pools; runs with fewer before them are not judged"},
			&cli.IntFlag{Name: flagWindowTrials, Value: results.DefaultWindowTrials, Usage: "most trials the newest runs pool against the baseline"},
			&cli.BoolFlag{Name: flagFailOnWorse, Usage: "exit 3 when the newest run's window is worse than its baseline"},
		},
		OnUsageError: usageError("history"),
		Action:       runHistory,
	}
}

// historyFiles lists the results files of args: a folder's *.jsonl, or the
// files named.
func historyFiles(args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("want a history folder or results files")
	}
	var files []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		m, err := filepath.Glob(filepath.Join(a, "*.jsonl"))
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s holds no results file (*.jsonl)", a)
		}
		files = append(files, m...)
	}
	return files, nil
}

func runHistory(c *cli.Context) error {
	format := c.String(flagFormat)
	if format != "text" && format != "json" {
		return cli.Exit(fmt.Sprintf("epwindow history: --%s %q: want text or json", flagFormat, format), exitUsage)
	}
	o := results.DriftOptions{BaselineTrials: c.Int(flagBaselineTrials), WindowTrials: c.Int(flagWindowTrials)}
	for _, f := range []struct {
		name string
		v    int
	}{{flagBaselineTrials, o.BaselineTrials}, {flagWindowTrials, o.WindowTrials}} {
		if f.v < 1 {
			return cli.Exit(fmt.Sprintf("epwindow history: --%s %d: want a positive number of trials", f.name, f.v), exitUsage)
		}
	}
	files, err := historyFiles(c.Args().Slice())
	if err != nil {
		return cli.Exit("epwindow history: "+err.Error(), exitUsage)
	}
	var runs []results.HistoryRun
	for _, path := range files {
		file, err := readResults(path, os.Stdin)
		if err != nil {
			return cli.Exit("epwindow history: "+err.Error(), exitUsage)
		}
		if file.Header == nil {
			return cli.Exit(fmt.Sprintf("epwindow history: %s has no header record: a history needs each run's settings and start (measure's JSON lines)", path), exitUsage)
		}
		runs = append(runs, results.HistoryRun{Name: filepath.Base(path), File: file})
	}
	slices.SortStableFunc(runs, func(a, b results.HistoryRun) int {
		if n := a.File.Header.StartedAt.Compare(b.File.Header.StartedAt); n != 0 {
			return n
		}
		return strings.Compare(a.Name, b.Name)
	})
	d := results.DriftOf(runs, o)
	render := results.NewDriftTextReporter(d, textWidth(c, c.App.Writer))
	if format == "json" {
		render = results.NewDriftJSONReporter(d)
	}
	if err := render(c.App.Writer); err != nil {
		return cli.Exit("epwindow history: "+err.Error(), exitFailure)
	}
	if c.Bool(flagFailOnWorse) && d.Latest.Verdict == results.Worse {
		return cli.Exit(fmt.Sprintf("epwindow history: %s: the window is worse than its baseline of %d trials", runs[d.Latest.Run].Name, d.Latest.BaselineN), exitThreshold)
	}
	return nil
}
