package main

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/results"
)

// gateConfig reads --max-p99, --max-regression and --baseline. The baseline
// file is read now, so a typo fails before anything is created.
func gateConfig(c *cli.Context) (results.Thresholds, *results.Summary, error) {
	t, err := compareThresholds(c)
	if err != nil {
		return t, nil, err
	}
	path := c.String(flagBaseline)
	if path == "" {
		if t.MaxRegression > 0 {
			return t, nil, fmt.Errorf("--%s needs --%s", flagMaxRegression, flagBaseline)
		}
		return t, nil, nil
	}
	base, err := loadSummary(path)
	if err != nil {
		return t, nil, fmt.Errorf("--%s: %w", flagBaseline, err)
	}
	return t, base, nil
}

// loadSummary decodes a results file and summarises its trials.
func loadSummary(path string) (*results.Summary, error) {
	file, err := readResults(path, os.Stdin)
	if err != nil {
		return nil, err
	}
	return results.Summarize(file, results.Options{}), nil
}

// gate compares with the baseline (when given), prints the comparison
// (fitting width columns, 0: no limit), and checks the thresholds; a
// breach returns exitThreshold.
func gate(w io.Writer, width int, next *results.Summary, t results.Thresholds, base *results.Summary) (int, error) {
	var cmp *results.Comparison
	if base != nil {
		cmp = results.Compare(base, next, results.CompareOptions{})
		fmt.Fprintln(w)
		if err := results.NewCompareTextReporterWidth(cmp, width)(w); err != nil {
			return exitFailure, fmt.Errorf("render comparison: %w", err)
		}
	}
	if t.Empty() {
		return exitOK, nil
	}
	breaches := t.Check(next, cmp)
	if len(breaches) == 0 {
		fmt.Fprintln(w, "thresholds: all met")
		return exitOK, nil
	}
	return breachCode(breaches), fmt.Errorf("%s", breachMessage(breaches))
}
