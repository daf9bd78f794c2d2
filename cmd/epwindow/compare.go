package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/results"
)

// Flags of compare that measure does not share.
const (
	flagMinChange    = "min-change"
	flagMinChangePct = "min-change-pct"
)

func compareCommand() *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "compare a run with a baseline, stage by stage; exit 3 when a threshold is breached",
		ArgsUsage: "BASELINE NEW",
		UsageText: `epwindow compare before-upgrade.jsonl after-upgrade.jsonl
   epwindow compare --max-p99 window=3s --max-p99 upstream_removed=2s --max-regression 20% base.jsonl new.jsonl`,
		Description: `For every stage and stage-to-stage delta, shows the change of p50, p95 and p99 with a seeded
bootstrap confidence interval, and a tail test: how many trials of each run lie above a threshold
of the pooled trials, judged exactly (Fisher) — trials cut at the hold count there at their seen
value. A metric is worse when a quantile with at least 5 trials of each run above it (p50 from 10
trials) has an interval above 0, or the tail test fires, AND the change reaches --min-change and
--min-change-pct of the baseline; better symmetrically, by the quantiles. The tests share 5%
(weighted Bonferroni: half to the window), so two runs of one setup are called different with at
most 5% chance. "same" is not "proved equal": see docs/compare.md for what 20, 40 and 120 trials
detect; a metric no test can judge at these run sizes says "not judged: n too small (needs n=N)".
Thresholds gate a pipeline: --max-p99 caps a stage's p99 in NEW, --max-regression caps the growth of
a quantile (or tail) judged worse; a floor from trials cut at the hold that is within a limit cannot
show it was met, nor can a metric --max-regression cannot judge.
Exit codes: 0 met, 2 bad input (or a file with no trial that measured the window), 3 breached,
6 cannot tell: a limit met only by a floor (rerun with a longer --hold) or a metric too few trials
judge (rerun with more --trials).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagFormat, Value: "text", Usage: "text, json, or html (one self-contained page: the verdicts and both runs' waterfalls on one time axis)"},
			wideFlag(),
			&cli.StringSliceFlag{Name: flagMaxP99, Usage: "fail (exit 3) when NEW's p99 of a stage exceeds a bound, e.g. window=3s (repeatable; a delta as from->to)"},
			&cli.StringFlag{Name: flagMaxRegression, Usage: "fail (exit 3) when a quantile judged worse grew by more than this, e.g. 20%"},
			&cli.DurationFlag{Name: flagMinChange, Value: results.DefaultMinChange, Usage: "smallest change of a quantile that can make a verdict"},
			&cli.StringFlag{Name: flagMinChangePct, Value: fmt.Sprintf("%g%%", results.DefaultMinChangeRel*100), Usage: "smallest change relative to the baseline that can make a verdict"},
		},
		OnUsageError: usageError("compare"),
		Action:       runCompare,
	}
}

// compareThresholds reads --max-p99 and --max-regression; measure's
// gateConfig reads the same flags the same way.
func compareThresholds(c *cli.Context) (results.Thresholds, error) {
	var t results.Thresholds
	var err error
	if t.MaxP99, err = results.ParseMaxP99(c.StringSlice(flagMaxP99)); err != nil {
		return t, err
	}
	t.MaxRegression, err = results.ParseRegression(c.String(flagMaxRegression))
	return t, err
}

func compareOptions(c *cli.Context) (results.CompareOptions, error) {
	o := results.CompareOptions{MinChange: c.Duration(flagMinChange)}
	if o.MinChange <= 0 {
		return o, fmt.Errorf("--%s %v: want a positive duration", flagMinChange, o.MinChange)
	}
	rel, err := results.ParseRegression(c.String(flagMinChangePct))
	if err != nil {
		return o, fmt.Errorf("--%s %q: want a positive percentage like 10%%", flagMinChangePct, c.String(flagMinChangePct))
	}
	o.MinChangeRel = rel
	return o, nil
}

func runCompare(c *cli.Context) error {
	if c.NArg() != 2 {
		return cli.Exit(fmt.Sprintf("epwindow compare: want two results files, BASELINE and NEW; got %d arguments", c.NArg()), exitUsage)
	}
	format := c.String(flagFormat)
	if format != "text" && format != "json" && format != "html" {
		return cli.Exit(fmt.Sprintf("epwindow compare: --%s %q: want text, json or html", flagFormat, format), exitUsage)
	}
	thresholds, err := compareThresholds(c)
	if err != nil {
		return cli.Exit("epwindow compare: "+err.Error(), exitUsage)
	}
	opts, err := compareOptions(c)
	if err != nil {
		return cli.Exit("epwindow compare: "+err.Error(), exitUsage)
	}
	if c.Args().Get(0) == "-" && c.Args().Get(1) == "-" {
		return cli.Exit("epwindow compare: only one of BASELINE and NEW can be - (standard input)", exitUsage)
	}
	var runs [2]*results.Summary
	for i, path := range []string{c.Args().Get(0), c.Args().Get(1)} {
		file, err := readResults(path, os.Stdin)
		if err != nil {
			return cli.Exit("epwindow compare: "+err.Error(), exitUsage)
		}
		if file.Interrupted() {
			fmt.Fprintf(c.App.ErrWriter, "epwindow compare: %s: the run was interrupted; comparing its %d finished trials\n", path, len(file.Trials))
		}
		runs[i] = results.Summarize(file, results.Options{})
		// The window is what every verdict is about: a file none of whose
		// trials measured it is no evidence, and a gate must not pass on it.
		if _, ok := runs[i].Dist(results.PointWindow); !ok {
			return cli.Exit(fmt.Sprintf("epwindow compare: %s holds no trial that measured the window (%s): nothing to compare", path, compareRunLine(runs[i])), exitUsage)
		}
	}
	cmp := results.Compare(runs[0], runs[1], opts)
	render := results.NewCompareTextReporterWidth(cmp, textWidth(c, c.App.Writer))
	switch format {
	case "json":
		render = results.NewCompareJSONReporter(cmp)
	case "html":
		render = results.NewCompareHTMLReporter(cmp, runs[0], runs[1])
	default:
		for i, label := range []string{"baseline", "new"} {
			fmt.Fprintf(c.App.Writer, "%-8s %s: %s\n", label, c.Args().Get(i), compareRunLine(runs[i]))
		}
		fmt.Fprintln(c.App.Writer)
	}
	if err := render(c.App.Writer); err != nil {
		return cli.Exit("epwindow compare: "+err.Error(), exitFailure)
	}
	if thresholds.Empty() {
		return nil
	}
	breaches := thresholds.Check(runs[1], cmp)
	if len(breaches) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "epwindow compare: thresholds: all met")
		return nil
	}
	return cli.Exit("epwindow compare: "+breachMessage(breaches), breachCode(breaches))
}

// breachCode is the exit code of breached thresholds: exitLowerBound when
// no breach is certain (every one cannot tell: a floor within its limit, a
// metric too few trials judge; a longer --hold or more --trials can), else
// exitThreshold.
func breachCode(bs []results.Breach) int {
	if results.OnlyCannotTell(bs) {
		return exitLowerBound
	}
	return exitThreshold
}

// breachMessage says what the breaches are, a line each: "N threshold(s)
// breached", or when none is certain that the run cannot tell whether they
// were met; the certain ones first.
func breachMessage(bs []results.Breach) string {
	var b strings.Builder
	certain := len(bs)
	for _, br := range bs {
		if br.CannotTell {
			certain--
		}
	}
	if certain == 0 {
		fmt.Fprintf(&b, "cannot tell whether the thresholds were met (%d cannot be told):", len(bs))
	} else {
		fmt.Fprintf(&b, "%d threshold(s) breached", certain)
		if certain < len(bs) {
			fmt.Fprintf(&b, ", %d more cannot be told", len(bs)-certain)
		}
		b.WriteString(":")
	}
	for _, cannot := range []bool{false, true} {
		for _, br := range bs {
			if br.CannotTell == cannot {
				fmt.Fprintf(&b, "\n  %s", br)
			}
		}
	}
	return b.String()
}

// compareRunLine describes a run in a line: its trials and where it was measured.
func compareRunLine(s *results.Summary) string {
	d := s.Doc()
	line := fmt.Sprintf("%d valid of %d trials", d.Valid, d.Trials)
	if d.Censored > 0 {
		line += fmt.Sprintf(" (%d cut at the hold)", d.Censored)
	}
	if h := s.Header; h != nil {
		if h.Ingress.Controller != "" {
			line += ", " + strings.TrimSpace(h.Ingress.Controller+" "+h.Ingress.Version)
		}
		if h.ServerVersion != "" {
			line += ", Kubernetes " + h.ServerVersion
		}
		if !h.StartedAt.IsZero() {
			line += ", " + h.StartedAt.UTC().Format("2006-01-02 15:04Z")
		}
	}
	if d.Interrupted {
		line += " (interrupted)"
	}
	return line
}
