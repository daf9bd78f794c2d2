package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// console prints a go test -json stream as plain go test does without -v:
// build errors as they come, one line per package, and for a failed
// package its output less the passing and skipped tests' (go test -json
// runs every test verbosely).
type console struct {
	w        io.Writer
	packages map[string]*pkgOutput
	failed   bool
}

// pkgOutput is a running package's output, in order, each line with its
// test ("" for the package's own: TestMain, the final ok/FAIL line).
type pkgOutput struct {
	lines []testLine
	ended map[string]bool // tests that passed or were skipped
}

type testLine struct{ test, text string }

func newConsole(w io.Writer) *console {
	return &console{w: w, packages: map[string]*pkgOutput{}}
}

// Add prints what e completes.
func (c *console) Add(e event) {
	switch {
	case e.Action == "build-output":
		fmt.Fprint(c.w, e.Output)
		return
	case e.Action == "build-fail":
		c.failed = true
		return
	case e.Package == "":
		return
	}
	p := c.packages[e.Package]
	if p == nil {
		p = &pkgOutput{ended: map[string]bool{}}
		c.packages[e.Package] = p
	}
	switch {
	case e.Action == "output":
		p.lines = append(p.lines, testLine{e.Test, e.Output})
	case (e.Action == "pass" || e.Action == "skip") && e.Test != "":
		p.ended[e.Test] = true
	case terminal(e.Action) && e.Test == "":
		p.print(c.w, e.Action == "fail")
		if e.Action == "fail" {
			c.failed = true
		}
		delete(c.packages, e.Package)
	}
}

// Text prints a line that is not a JSON event as it is.
func (c *console) Text(line string) { fmt.Fprintln(c.w, line) }

// Close prints the output of packages whose stream ended before they did
// (the command was killed), and reports whether anything failed.
func (c *console) Close() (failed bool) {
	for _, p := range c.packages {
		p.print(c.w, true)
		failed = true
	}
	clear(c.packages)
	return failed || c.failed
}

// print writes a failed package's output less what its passing and
// skipped tests wrote, or a passing package's ok line.
func (p *pkgOutput) print(w io.Writer, failed bool) {
	for _, l := range p.lines {
		switch {
		case failed && !p.ended[l.test]:
			fmt.Fprint(w, l.text)
		case !failed && l.test == "" && (strings.HasPrefix(l.text, "ok  ") || strings.HasPrefix(l.text, "?   ")):
			fmt.Fprint(w, l.text)
		}
	}
}

// runResult is what a run saw.
type runResult struct {
	Failed  bool
	Summary *Summary
}

// run copies the stream r to save, prints it on w as plain go test would,
// and summarises it as phase.
func run(r io.Reader, save io.Writer, w io.Writer, phase string) (runResult, error) {
	c := newConsole(w)
	s := NewSummary(phase)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	var saveErr error
	for sc.Scan() {
		line := sc.Bytes()
		if saveErr == nil {
			_, saveErr = fmt.Fprintf(save, "%s\n", line)
		}
		e, ok := decodeEvent(line)
		if !ok {
			c.Text(string(line))
			continue
		}
		c.Add(e)
		s.Add(e)
	}
	err := sc.Err()
	if err != nil {
		// Drain, so that go test is not blocked writing to a full pipe.
		_, _ = io.Copy(io.Discard, r)
	}
	failed := c.Close()
	s.Close()
	if err == nil {
		err = saveErr
	}
	return runResult{Failed: failed, Summary: s}, err
}
