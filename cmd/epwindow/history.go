package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/monitor"
	"github.com/epwindow/epwindow/results"
)

// Flags of history.
const (
	flagBaselineTrials = "baseline-trials"
	flagWindowTrials   = "window-trials"
	flagFailOnWorse    = "fail-on-worse"
	flagServe          = "serve"
	flagExpectEvery    = "expect-run-every"
	flagRefresh        = "refresh"
	flagDocumented     = "documented-prestop"
	flagChart          = "chart"
)

func historyCommand() *cli.Command {
	return &cli.Command{
		Name:      "history",
		Usage:     "judge the newest of a history of runs against the pooled runs before it; exit 3 with --fail-on-worse",
		ArgsUsage: "DIR|RESULTS...",
		UsageText: `epwindow history /var/lib/epwindow/history
   epwindow history --fail-on-worse --baseline-trials 120 runs/*.jsonl
   epwindow history --format markdown --chart docs/window-trend.svg --documented-prestop 5s runs/ > docs/window.md
   epwindow history --serve :9090 --documented-prestop 5s /var/lib/epwindow/history   # Prometheus metrics`,
		Description: `Reads every results file of a history (a folder's *.jsonl, or the files named), in the order
the runs started, and splits it where the settings that shape the window changed (Kubernetes
version, ingress controller, its version and settings, route, observers, hold): runs of different
settings are never pooled, and the report names the change. In the newest segment each run is
judged as a scheduled run is (docs/continuous.md): the segment's first --baseline-trials trials are
its reference; later runs come in blocks of up to --window-trials trials, each screened against
half of the reference (compare's tests on the window); a screen that fires makes the run suspect,
and the trials after it, tested against the other half, confirm it (worse: what --fail-on-worse and
the alert act on) or clear it. A confirmed change is held until a later window is like the
reference again. In simulated months of no change 0.7% raised the alarm; a +30 s slow mode in 10%
of deletions was caught within a median of 12 runs of 10 trials.
Files that are not runs (empty, no header, not results), runs that start more than 10 minutes
after the read (a node's clock is wrong) and copies of a run (the same header) are skipped, each
named in a warning; a history with no run left is bad input.
With --serve the history is also served as Prometheus metrics (OpenMetrics) on /metrics, read
again every --refresh (only the files that changed are parsed again), with the reads' health
(last read, files skipped); deploy/monitoring has a PodMonitor and alert rules for them.
Exit codes: 0 judged (or not yet judgeable; with --serve: stopped), 2 bad input, 3 the newest run
is worse and --fail-on-worse is set.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagFormat, Value: "text", Usage: "text, markdown (for platform docs), json or html (one self-contained page with the trend)"},
			wideFlag(),
			chartFlag(),
			&cli.IntFlag{Name: flagBaselineTrials, Value: results.DefaultBaselineTrials, Usage: "trials of the segment's first runs that make its reference; runs before it fills are not judged"},
			&cli.IntFlag{Name: flagWindowTrials, Value: results.DefaultWindowTrials, Usage: "trials a block of new runs pools before it joins the reference; also the size of a confirmation and of a release window"},
			&cli.BoolFlag{Name: flagFailOnWorse, Usage: "exit 3 when the newest run's window is worse than its baseline"},
			&cli.StringFlag{Name: flagServe, Usage: "serve the history's metrics on this address's /metrics until stopped, e.g. :9090"},
			&cli.DurationFlag{Name: flagRefresh, Value: time.Minute, Usage: "with --serve: how often the history is read again"},
			&cli.DurationFlag{Name: flagDocumented, Usage: "the preStop the platform documents, exported for the alert on the window's bound"},
			&cli.DurationFlag{Name: flagExpectEvery, Usage: "with --serve: the longest time the schedule leaves between two runs, exported for the alert on a schedule that stopped measuring"},
		},
		OnUsageError: usageError("history"),
		Action:       runHistory,
	}
}

// historyFiles lists the results files of args: a folder's *.jsonl, or the
// files named.
func historyFiles(args []string, emptyOK bool) ([]string, error) {
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
		if len(m) == 0 && !emptyOK {
			return nil, fmt.Errorf("%s holds no results file (*.jsonl)", a)
		}
		files = append(files, m...)
	}
	return files, nil
}

// chartFlag is --chart of history (and report over a history folder).
func chartFlag() cli.Flag {
	return &cli.StringFlag{Name: flagChart, Usage: "write the window's bound and median per run as an SVG chart to this file; markdown links it", TakesFile: true}
}

func runHistory(c *cli.Context) error {
	return historyAction(c, "history")
}

// historyAction renders the history of c's arguments; cmd names the
// command in messages (history, or report over a folder).
func historyAction(c *cli.Context, cmd string) error {
	format := c.String(flagFormat)
	if format != "text" && format != "json" && format != "markdown" && format != "html" {
		return cli.Exit(fmt.Sprintf("epwindow %s: --%s %q: want text, markdown, json or html for a history", cmd, flagFormat, format), exitUsage)
	}
	if c.String(flagChart) != "" && format != "markdown" {
		return cli.Exit(fmt.Sprintf("epwindow %s: --%s needs --%s markdown (the chart is linked from it)", cmd, flagChart, flagFormat), exitUsage)
	}
	// report over a folder has none of history's sizing flags: the
	// defaults (results.DriftOf's).
	o := results.DriftOptions{BaselineTrials: results.DefaultBaselineTrials, WindowTrials: results.DefaultWindowTrials}
	if cmd == "history" {
		o.BaselineTrials, o.WindowTrials = c.Int(flagBaselineTrials), c.Int(flagWindowTrials)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{flagBaselineTrials, o.BaselineTrials}, {flagWindowTrials, o.WindowTrials}} {
		if f.v < 1 {
			return cli.Exit(fmt.Sprintf("epwindow %s: --%s %d: want a positive number of trials", cmd, f.name, f.v), exitUsage)
		}
	}
	if cmd == "history" && c.Duration(flagRefresh) <= 0 {
		return cli.Exit(fmt.Sprintf("epwindow history: --%s %v: want a positive duration", flagRefresh, c.Duration(flagRefresh)), exitUsage)
	}
	for _, f := range []string{flagDocumented, flagExpectEvery} {
		if c.Duration(f) < 0 {
			return cli.Exit(fmt.Sprintf("epwindow history: --%s %v: must not be negative", f, c.Duration(f)), exitUsage)
		}
	}
	// Served, a folder may be empty yet: deployed beside a new schedule,
	// the server starts before the first run has written its file.
	serving := c.String(flagServe) != ""
	loader := newHistoryLoader()
	load, err := loader.load(c.Args().Slice(), serving, time.Now())
	if err != nil {
		return cli.Exit("epwindow "+cmd+": "+err.Error(), exitUsage)
	}
	warnSkipped(c.App.ErrWriter, cmd, load, nil)
	if len(load.runs) == 0 && len(load.skipped) > 0 && !serving {
		return cli.Exit("epwindow "+cmd+": "+noRuns(load).Error(), exitUsage)
	}
	runs := load.runs
	d := results.DriftOf(runs, o)
	render := results.NewDriftTextReporter(d, textWidth(c, c.App.Writer))
	switch format {
	case "json":
		render = results.NewDriftJSONReporter(d)
	case "markdown":
		chart := c.String(flagChart)
		if chart != "" {
			if err := writeChart(chart, d, c.Duration(flagDocumented)); err != nil {
				return cli.Exit(fmt.Sprintf("epwindow %s: --%s %s: %v", cmd, flagChart, chart, err), exitUsage)
			}
		}
		render = results.NewDriftMarkdownReporter(d, chart)
	case "html":
		render = results.NewDriftHTMLReporter(d, c.Duration(flagDocumented))
	}
	if err := render(c.App.Writer); err != nil {
		return cli.Exit("epwindow "+cmd+": "+err.Error(), exitFailure)
	}
	if addr := c.String(flagServe); addr != "" {
		return serveHistory(c, addr, d, o, loader, load)
	}
	if c.Bool(flagFailOnWorse) && d.Latest.Verdict == results.Worse {
		return cli.Exit(fmt.Sprintf("epwindow history: %s: the window is worse than its baseline of %d trials", runs[d.Latest.Run].Name, d.Latest.BaselineN), exitThreshold)
	}
	return nil
}

// serveHistory serves the metrics of the history (first d, read as
// load) on addr's /metrics until the command's context ends, reading the
// history again every --refresh with loader, which parses only the files
// that changed, and judging it again only when its runs changed; a read
// that fails is reported, counted and the last state kept, and a file
// skipped is warned about once.
func serveHistory(c *cli.Context, addr string, d *results.Drift, o results.DriftOptions, loader *historyLoader, load *historyLoad) error {
	refresh := c.Duration(flagRefresh)
	coll := monitor.NewCollector(monitor.Options{Documented: c.Duration(flagDocumented), RunEvery: c.Duration(flagExpectEvery),
		Since: time.Now(), Refresh: refresh})
	coll.Update(d, monitor.Read{At: time.Now(), Skipped: load.skippedBy()})
	reg := prometheus.NewRegistry()
	reg.MustRegister(coll)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return cli.Exit(fmt.Sprintf("epwindow history: --%s %s: %v", flagServe, addr, err), exitUsage)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(c.App.ErrWriter, "epwindow history: serving metrics on http://%s/metrics\n", ln.Addr())
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	for {
		select {
		case <-c.Context.Done():
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		case err := <-served:
			return cli.Exit("epwindow history: serve: "+err.Error(), exitFailure)
		case now := <-tick.C:
			next, err := loader.load(c.Args().Slice(), true, now)
			if err != nil {
				coll.ReadFailed()
				fmt.Fprintf(c.App.ErrWriter, "epwindow history: read again: %v (serving the last state)\n", err)
				continue
			}
			warnSkipped(c.App.ErrWriter, "history", next, load)
			read := monitor.Read{At: now, Skipped: next.skippedBy()}
			if next.sameRuns(load) {
				coll.Reread(read)
			} else {
				coll.Update(results.DriftOf(next.runs, o), read)
			}
			load = next
		}
	}
}

// writeChart writes the history's SVG chart to path, whole or not at all.
func writeChart(path string, d *results.Drift, documented time.Duration) error {
	return writeFileWhole(path, func(w io.Writer) error { return results.WriteDriftChartSVG(w, d, documented) })
}

// writeFileWhole writes what render renders to path, whole or not at all:
// into a temporary file beside it, renamed over it once complete.
func writeFileWhole(path string, render results.Reporter) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".epwindow-*"+filepath.Ext(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := render(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
