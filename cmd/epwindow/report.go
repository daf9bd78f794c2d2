package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// Flags of report (and compare).
const (
	flagFormat              = "format"
	flagSVG                 = "svg"
	flagPlot                = "plot"
	flagMargin              = "margin"
	flagHeadroom            = "headroom"
	flagQuantile            = "quantile"
	flagConfidence          = "confidence"
	flagDeregistrationDelay = measure.FlagDeregDelay
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "render a results file again (text, markdown, json, csv, perfdata, svg) without a cluster",
		ArgsUsage: "RESULTS",
		UsageText: `epwindow report epwindow-20261129-180000.jsonl
   epwindow report --format markdown run.jsonl >> docs/platform/termination.md
   epwindow report --plot run.jsonl
   epwindow report --drain 30s --deregistration-delay 15s run.jsonl   # recommend for your app and LB
   cat run.jsonl | epwindow report --format perfdata -
   epwindow report --format svg run.jsonl > run.svg                   # the deletion waterfall
   epwindow report --format markdown --svg run.svg run.jsonl > run.md  # Markdown linking the waterfall
   epwindow report --format markdown --chart window-trend.svg runs/   # a folder: the history's trend`,
		Description: `Reads a results file written by "epwindow measure" (JSON lines) or by "report --format csv"
(the format is detected; "-" reads standard input), recomputes the percentiles from its trials and
renders them. An interrupted run (no summary record, or a cut last line) is reported from the trials
it finished, and says so. The bootstrap is seeded: the same file always renders the same report.
A folder of results files is a history of runs: report renders it as "epwindow history" does
(text, markdown with --chart, or json).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagFormat, Value: "text", Usage: "text, markdown, json, csv, perfdata (ClusterLoader2 PerfData), svg (the deletion waterfall) or html (one self-contained page)"},
			&cli.StringFlag{Name: flagSVG, Usage: "with --format markdown: also write the deletion waterfall to this SVG file and link it (the path as given: relative to the Markdown's folder)", TakesFile: true},
			&cli.BoolFlag{Name: flagPlot, Usage: "add terminal charts (text format): the CDF of the window and each stage per trial"},
			wideFlag(),
			chartFlag(),
			&cli.DurationFlag{Name: measure.FlagDrain, Usage: "longest request your app serves after SIGTERM (default: the run's --drain)"},
			&cli.DurationFlag{Name: flagMargin, Value: results.DefaultMargin, Usage: "least margin added to the covered quantile (the worst observer resolution raises it)"},
			&cli.DurationFlag{Name: flagHeadroom, Value: results.DefaultHeadroom, Usage: "added to preStop + drain for terminationGracePeriodSeconds"},
			&cli.Float64Flag{Name: flagQuantile, Usage: fmt.Sprintf("share of deletions the preStop covers, bounded from above with --%s (default: the run's, else %g)", flagConfidence, results.DefaultQuantile)},
			&cli.Float64Flag{Name: flagConfidence, Usage: fmt.Sprintf("confidence of that upper bound (default: the run's, else %g)", results.DefaultConfidence)},
			&cli.DurationFlag{Name: flagDeregistrationDelay, Usage: "a load balancer's deregistration delay the preStop must exceed (default: the one measure --deregistration-delay recorded, if any)"},
		},
		OnUsageError: usageError("report"),
		Action:       runReport,
	}
}

// usageError makes urfave/cli's own flag errors exit with exitUsage.
func usageError(cmd string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return cli.Exit(fmt.Sprintf("epwindow %s: %v", cmd, err), exitUsage)
	}
}

// reportOptions turns report's flags into results.Options.
func reportOptions(c *cli.Context) (results.Options, error) {
	q, conf, err := boundFlags(c)
	o := results.Options{
		Quantile:            q,
		Confidence:          conf,
		Margin:              c.Duration(flagMargin),
		Drain:               c.Duration(measure.FlagDrain),
		Headroom:            c.Duration(flagHeadroom),
		DeregistrationDelay: c.Duration(flagDeregistrationDelay),
	}
	switch {
	case err != nil:
		return o, err
	case o.Margin <= 0:
		return o, fmt.Errorf("--%s %v: want a positive duration", flagMargin, o.Margin)
	case o.Headroom <= 0:
		return o, fmt.Errorf("--%s %v: want a positive duration", flagHeadroom, o.Headroom)
	case o.Drain < 0:
		return o, fmt.Errorf("--%s %v: must not be negative", measure.FlagDrain, o.Drain)
	case o.DeregistrationDelay < 0:
		return o, fmt.Errorf("--%s %v: must not be negative", flagDeregistrationDelay, o.DeregistrationDelay)
	}
	return o, nil
}

// boundFlags reads --quantile and --confidence: each a fraction strictly
// between 0 and 1 when given, 0 (the run's, then the default) when not.
func boundFlags(c *cli.Context) (q, conf float64, err error) {
	for _, f := range []struct {
		name string
		v    *float64
	}{{flagQuantile, &q}, {flagConfidence, &conf}} {
		if !c.IsSet(f.name) {
			continue
		}
		*f.v = c.Float64(f.name)
		if err := fraction(f.name, *f.v); err != nil {
			return 0, 0, err
		}
	}
	return q, conf, nil
}

// fraction checks that flag's value v lies strictly between 0 and 1.
func fraction(flag string, v float64) error {
	if !(v > 0 && v < 1) {
		return fmt.Errorf("--%s %v: want a fraction strictly between 0 and 1, e.g. 0.95", flag, v)
	}
	return nil
}

// readResults decodes a results file; "-" is standard input.
func readResults(path string, stdin io.Reader) (*results.File, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	file, err := results.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return file, nil
}

func runReport(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit(fmt.Sprintf("epwindow report: want one results file (or - for standard input), got %d arguments: %q", c.NArg(), c.Args().Slice()), exitUsage)
	}
	if st, err := os.Stat(c.Args().First()); err == nil && st.IsDir() {
		// A folder is a history of runs: its drift, as epwindow history
		// renders it (docs/continuous.md).
		return historyAction(c, "report")
	}
	if c.String(flagChart) != "" {
		return cli.Exit(fmt.Sprintf("epwindow report: --%s draws a history's trend: give a folder of runs", flagChart), exitUsage)
	}
	format := c.String(flagFormat)
	newReporter, ok := results.Reporters[format]
	if !ok {
		return cli.Exit(fmt.Sprintf("epwindow report: --%s %q: want one of %s", flagFormat, format, strings.Join(results.ReporterNames(), ", ")), exitUsage)
	}
	if c.String(flagSVG) != "" && format != "markdown" {
		return cli.Exit(fmt.Sprintf("epwindow report: --%s needs --%s markdown (the picture is linked from it; --%s svg writes it alone)", flagSVG, flagFormat, flagFormat), exitUsage)
	}
	if c.Bool(flagPlot) && format != "text" {
		return cli.Exit(fmt.Sprintf("epwindow report: --%s draws terminal charts: use it with --%s text", flagPlot, flagFormat), exitUsage)
	}
	opts, err := reportOptions(c)
	if err != nil {
		return cli.Exit("epwindow report: "+err.Error(), exitUsage)
	}
	path := c.Args().First()
	file, err := readResults(path, os.Stdin)
	if err != nil {
		return cli.Exit("epwindow report: "+err.Error(), exitUsage)
	}
	if file.Interrupted() {
		msg := fmt.Sprintf("epwindow report: %s: the run was interrupted; reporting its %d finished trials", path, len(file.Trials))
		if w := textWidth(c, c.App.ErrWriter); w > 0 {
			msg = results.FitLines(msg, w)
		}
		fmt.Fprintln(c.App.ErrWriter, msg)
	}
	sum := results.Summarize(file, opts)
	render := newReporter(sum)
	switch {
	case format == "text":
		render = results.NewTextReporterWidth(sum, textWidth(c, c.App.Writer))
	case c.String(flagSVG) != "":
		picture := c.String(flagSVG)
		if err := writeFileWhole(picture, results.NewWaterfallReporter(sum)); err != nil {
			return cli.Exit(fmt.Sprintf("epwindow report: --%s %s: %v", flagSVG, picture, err), exitUsage)
		}
		render = results.NewMarkdownReporterWith(sum, picture)
	}
	if err := render(c.App.Writer); err != nil {
		return cli.Exit("epwindow report: "+err.Error(), exitFailure)
	}
	if c.Bool(flagPlot) {
		fmt.Fprintln(c.App.Writer)
		if err := results.NewPlotReporter(sum)(c.App.Writer); err != nil {
			return cli.Exit("epwindow report: "+err.Error(), exitFailure)
		}
	}
	printHints(c.App.ErrWriter, "report", textWidth(c, c.App.ErrWriter), sum)
	return nil
}
