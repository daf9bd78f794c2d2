package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// slowestTests is how many top-level tests a cluster package lists.
const slowestTests = 3

// Report prints the closed summary: a row per test package, slowest
// first; under a package that started local clusters, its lock wait,
// cluster starts, tests and stops, and its slowest tests. Packages without
// test files are counted on one line.
func (s *Summary) Report(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "test packages, slowest first (wall time of the test binary, without compiling it):")
	fmt.Fprintln(tw, "  phase\tpackage\t    wall\tstatus")
	empty := 0
	for _, p := range s.packages {
		if p.Status == "skip" && len(p.Tests) == 0 && !p.BuildFailed {
			empty++
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%8s\t%s\n", p.Phase, p.Name, secs(p.Elapsed), status(p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range s.packages {
		if p.Clusters == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s (%s): %s waiting for the lock, %s starting %s, %s of tests, %s stopping\n",
			p.Name, secs(p.Elapsed), secs(p.LockWait), secs(p.Start), plural(p.Clusters, "cluster"), secs(p.TestTime()), secs(p.Stop))
		if len(p.Tests) > 0 {
			var b strings.Builder
			for i, t := range p.Tests[:min(slowestTests, len(p.Tests))] {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%s %s", t.Name, secs(t.Elapsed))
				if t.Status != "pass" {
					fmt.Fprintf(&b, " (%s)", t.Status)
				}
			}
			fmt.Fprintf(w, "    slowest of %s: %s\n", plural(len(p.Tests), "test"), b.String())
		}
	}
	if empty > 0 {
		fmt.Fprintf(w, "  (and %s without test files)\n", plural(empty, "package"))
	}
	return nil
}

func status(p *Package) string {
	switch {
	case p.BuildFailed:
		return "FAIL (build)"
	case p.Status == "fail":
		return "FAIL"
	case p.Status == "skip":
		return "skip"
	}
	return "ok"
}

// secs prints a duration in seconds, to 0.1 s: the test binaries' own
// times have 10 ms precision.
func secs(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}

func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
