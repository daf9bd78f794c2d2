package main

import (
	"io"
	"os"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/epwindow/epwindow/results"
)

// flagWide asks for the text tables at their widest.
const flagWide = "wide"

// wideFlag is --wide, for every subcommand that prints a text report.
func wideFlag() cli.Flag {
	return &cli.BoolFlag{Name: flagWide, Usage: "print the text tables at their widest, whatever the terminal's width (default: fit the terminal, 100 columns when it is narrower or not a terminal)"}
}

// textWidth is the width the text reports written to w fit: no limit
// with --wide, the terminal's width when w is a terminal wider than
// results.TextWidth, else results.TextWidth (a pipe, a file, a CI log).
func textWidth(c *cli.Context, w io.Writer) int {
	if c.Bool(flagWide) {
		return 0
	}
	return terminalWidth(w)
}

// terminalWidth is w's terminal width when w is a terminal wider than
// results.TextWidth, else results.TextWidth.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return results.TextWidth
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return results.TextWidth
	}
	return max(cols, results.TextWidth)
}
