package verify

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// Reporter writes a report in one format.
type Reporter func(io.Writer, *Report) error

// Reporters by --format name.
var Reporters = map[string]Reporter{"text": Text, "json": JSON, "markdown": Markdown}

func dur(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }

// verdictLine reads "PASS", "FAIL" or "BLIND".
func verdictLine(v Verdict) string {
	switch {
	case v.Blind:
		return "BLIND"
	case v.Pass:
		return "PASS"
	}
	return "FAIL"
}

// sideSummary reads "9 shutdown (after deletion: 2ms..2.9s), 1 startup".
func sideSummary(r Rollout) string {
	type span struct{ n, lo, hi int64 }
	m := map[string]*span{}
	for _, f := range r.Failures {
		s := m[f.Side]
		if s == nil {
			s = &span{lo: f.SinceNS, hi: f.SinceNS}
			m[f.Side] = s
		}
		s.n++
		s.lo, s.hi = min(s.lo, f.SinceNS), max(s.hi, f.SinceNS)
	}
	var parts []string
	for _, side := range []string{SideShutdown, SideStartup, SideUnknown} {
		s := m[side]
		if s == nil {
			continue
		}
		what := map[string]string{SideShutdown: "after a pod deletion", SideStartup: "after a pod Ready", SideUnknown: "before any pod event"}[side]
		if side == SideUnknown {
			parts = append(parts, fmt.Sprintf("%d %s", s.n, side))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %s side (%s..%s %s)", s.n, side, dur(s.lo), dur(s.hi), what))
	}
	return strings.Join(parts, ", ")
}

func basisOf(r Rollout) string {
	for _, f := range r.Failures {
		if f.Basis == BasisTiming {
			return "by timing (--check-port attributes by the pods' own ports)"
		}
	}
	return "by the pods' own ports"
}

// Text is the terminal report.
func Text(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "verify %s/%s: %d replicas, %g req/s %s %s", r.Namespace, r.Deployment, r.Replicas, r.Rate, r.Method, r.URL)
	if r.Host != "" {
		fmt.Fprintf(&b, " (Host %s)", r.Host)
	}
	b.WriteString("\n")
	if r.RouteCheck != "" {
		fmt.Fprintf(&b, "route: %s\n", r.RouteCheck)
	}
	if r.Sidecar {
		b.WriteString("windows: each replaced pod's last traffic after its deletion, from its epwindow sidecar (information: the failures decide)\n")
	}
	if st := r.SelfTest; st != nil {
		fmt.Fprintf(&b, "self-test (broken canary, %d replicas, %d terminations): %s\n", st.Replicas, st.Terminations, st.Outcomes)
		if st.Blind {
			fmt.Fprintf(&b, "  blind: %s\n", st.Cause)
		}
	}
	if s := r.Shape; s != nil {
		fmt.Fprintf(&b, "shape: window %s (%s): about %.1f requests per termination in the window\n", dur(s.WindowNS), s.Source, s.PerTermination)
		if s.Warning != "" {
			fmt.Fprintf(&b, "  warning: %s\n", s.Warning)
		}
	}
	if r.Baseline != nil {
		fmt.Fprintf(&b, "baseline before the rollouts: %s\n", *r.Baseline)
	}
	for _, ro := range r.Rollouts {
		fmt.Fprintf(&b, "rollout %d: ", ro.N)
		if ro.Complete {
			fmt.Fprintf(&b, "complete in %s (replaced pods gone after %s)\n", dur(ro.DurationNS), dur(ro.DrainedNS))
		} else {
			fmt.Fprintf(&b, "NOT complete: %s\n", ro.Condition)
		}
		fmt.Fprintf(&b, "  responses: %s\n", ro.Outcomes)
		if len(ro.Failures) > 0 {
			fmt.Fprintf(&b, "  failures: %s, %s\n", sideSummary(ro), basisOf(ro))
		}
		for _, w := range ro.Windows {
			fmt.Fprintf(&b, "  window %s\n", w)
		}
		for _, e := range ro.Exits {
			mark := ""
			switch {
			case e.NeverReady:
				mark = "  (" + neverReadyNote + ")"
			case e.Killed():
				mark = "  <- SIGKILL: the grace period ran out"
			case e.Failed(r.AllowExitCodes):
				mark = "  <- fails the gate (--" + FlagAllowExitCodes + " to accept)"
			}
			fmt.Fprintf(&b, "  exit %s%s\n", e, mark)
		}
		for _, p := range ro.Ports {
			fmt.Fprintf(&b, "  port %s\n", p)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	fmt.Fprintf(&b, "verdict: %s\n", verdictLine(r.Verdict))
	for _, why := range r.Verdict.Reasons {
		fmt.Fprintf(&b, "  - %s\n", why)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// JSON is the report as one JSON document.
func JSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Markdown is the report as a pull-request comment.
func Markdown(w io.Writer, r *Report) error {
	var b strings.Builder
	icon := map[string]string{"PASS": "✅", "FAIL": "❌", "BLIND": "⚠️"}[verdictLine(r.Verdict)]
	fmt.Fprintf(&b, "### %s epwindow verify `%s/%s`: %s\n\n", icon, r.Namespace, r.Deployment, verdictLine(r.Verdict))
	fmt.Fprintf(&b, "%d replicas, %g req/s `%s %s`", r.Replicas, r.Rate, r.Method, r.URL)
	if r.Host != "" {
		fmt.Fprintf(&b, " (Host `%s`)", r.Host)
	}
	b.WriteString("\n\n")
	for _, why := range r.Verdict.Reasons {
		fmt.Fprintf(&b, "- %s\n", why)
	}
	if len(r.Verdict.Reasons) > 0 {
		b.WriteString("\n")
	}
	if r.RouteCheck != "" {
		fmt.Fprintf(&b, "Route: %s\n\n", r.RouteCheck)
	}
	if st := r.SelfTest; st != nil {
		fmt.Fprintf(&b, "Self-test (broken canary, %d terminations): %s", st.Terminations, st.Outcomes)
		if st.Blind {
			fmt.Fprintf(&b, " — **blind**: %s", st.Cause)
		}
		b.WriteString("\n\n")
	}
	if s := r.Shape; s != nil {
		fmt.Fprintf(&b, "Shape: window %s (%s), about %.1f requests per termination.", dur(s.WindowNS), s.Source, s.PerTermination)
		if s.Warning != "" {
			fmt.Fprintf(&b, " **Warning:** %s", s.Warning)
		}
		b.WriteString("\n\n")
	}
	if len(r.Rollouts) > 0 {
		// --sidecar: each replaced pod's window beside the failures.
		windows := ""
		if r.Sidecar {
			windows = " windows (sidecar) |"
		}
		b.WriteString("| rollout | complete | duration | 2xx | failed | shutdown side | startup side | SIGKILL exits |" + windows + "\n")
		b.WriteString("|---:|:---:|---:|---:|---:|---:|---:|---:|" + map[bool]string{true: "---|"}[r.Sidecar] + "\n")
		for _, ro := range r.Rollouts {
			sides := ro.Sides()
			killed := 0
			for _, e := range ro.Exits {
				if e.Killed() && !e.NeverReady {
					killed++
				}
			}
			done := "yes"
			if !ro.Complete {
				done = "**no**"
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %d | %d | %d | %d | %d |", ro.N, done, dur(ro.DurationNS), ro.Outcomes.OK,
				ro.Outcomes.Failures(), sides[SideShutdown], sides[SideStartup], killed)
			if r.Sidecar {
				var cells []string
				for _, w := range ro.Windows {
					cells = append(cells, w.Pod+" "+w.Short())
				}
				fmt.Fprintf(&b, " %s |", strings.Join(cells, ", "))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	var details []string
	for _, ro := range r.Rollouts {
		if ro.Outcomes.Failures() > 0 {
			details = append(details, fmt.Sprintf("- rollout %d: %s; %s", ro.N, ro.Outcomes, sideSummary(ro)))
		}
		for _, p := range ro.Ports {
			details = append(details, fmt.Sprintf("- rollout %d port check: %s", ro.N, p))
		}
		for _, w := range ro.Windows {
			details = append(details, fmt.Sprintf("- rollout %d window: %s", ro.N, w))
		}
		for _, e := range ro.Exits {
			switch {
			case e.ExitCode != 0 && e.NeverReady:
				details = append(details, fmt.Sprintf("- rollout %d exit: %s (%s)", ro.N, e, neverReadyNote))
			case e.ExitCode != 0:
				details = append(details, fmt.Sprintf("- rollout %d exit: %s", ro.N, e))
			}
		}
	}
	if len(details) > 0 {
		b.WriteString("<details><summary>Details</summary>\n\n")
		b.WriteString(strings.Join(details, "\n"))
		b.WriteString("\n\n</details>\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n> %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// JUnit XML: one test suite, one test case per rollout (and one for the
// self-test), as CI systems read it.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// JUnit writes the report as JUnit XML. Its test cases fail exactly when
// the verdict does: the baseline, the self-test, each rollout (its
// failures once the run's total passes --max-failures, a rollout not
// complete, a failed exit), the number of rollouts that ran, and whatever
// else stopped the run.
func JUnit(w io.Writer, r *Report) error {
	class := "epwindow.verify." + r.Namespace + "." + r.Deployment
	s := junitSuite{Name: "epwindow verify " + r.Namespace + "/" + r.Deployment}
	var total time.Duration
	fail := func(c *junitCase, typ string, why []string) {
		if len(why) > 0 {
			c.Failure = &junitFailure{Message: why[0], Type: typ, Text: strings.Join(why, "\n")}
		}
	}
	if b := r.Baseline; b != nil {
		c := junitCase{Name: "baseline: the route answers before any rollout", ClassName: class, Time: "0", SystemOut: b.String()}
		if b.Failures() > 0 {
			fail(&c, "baseline", []string{fmt.Sprintf("%d requests failed before any rollout: the app or the route fails without a rollout", b.Failures())})
		}
		s.Cases = append(s.Cases, c)
	}
	if st := r.SelfTest; st != nil {
		c := junitCase{Name: "self-test: broken canary fails requests", ClassName: class, Time: "0", SystemOut: st.Outcomes.String()}
		if st.Blind {
			c.Failure = &junitFailure{Message: "the gate is blind", Type: "blind", Text: st.Cause}
		}
		s.Cases = append(s.Cases, c)
	}
	failed := 0
	for _, ro := range r.Rollouts {
		total += ro.Duration()
		c := junitCase{Name: fmt.Sprintf("rollout %d", ro.N), ClassName: class, Time: fmt.Sprintf("%.3f", ro.Duration().Seconds())}
		var why []string
		if !ro.Complete {
			why = append(why, "not complete: "+ro.Condition)
		}
		// --max-failures is over all rollouts: a rollout's failures fail
		// its case once the total so far passes it.
		n := ro.Outcomes.Failures()
		failed += n
		if n > 0 && failed > r.MaxFailures {
			why = append(why, fmt.Sprintf("%d failed requests (%d so far, --%s %d): %s; %s", n, failed, FlagMaxFailures, r.MaxFailures, ro.Outcomes, sideSummary(ro)))
		}
		why = append(why, exitReasons(ro, r.AllowExitCodes)...)
		var out []string
		out = append(out, "responses: "+ro.Outcomes.String())
		for _, p := range ro.Ports {
			out = append(out, "port "+p.String())
		}
		for _, w := range ro.Windows {
			out = append(out, "window "+w.String())
		}
		c.SystemOut = strings.Join(out, "\n")
		fail(&c, "rollout", why)
		s.Cases = append(s.Cases, c)
	}
	if r.Requested > 0 && !r.Verdict.Blind {
		c := junitCase{Name: fmt.Sprintf("rollouts: %d requested", r.Requested), ClassName: class, Time: "0"}
		switch {
		case r.Interrupted:
			fail(&c, "interrupted", []string{fmt.Sprintf("interrupted after %d of %d rollouts", len(r.Rollouts), r.Requested)})
		case len(r.Rollouts) < r.Requested:
			fail(&c, "rollouts", []string{fmt.Sprintf("%d of %d rollouts ran", len(r.Rollouts), r.Requested)})
		}
		s.Cases = append(s.Cases, c)
	}
	// Whatever else failed the verdict (the run's own error) fails a case
	// of its own, so that the file never passes a run that did not.
	if !r.Verdict.Pass && !anyFailed(s.Cases) {
		c := junitCase{Name: "verdict", ClassName: class, Time: "0"}
		why := r.Verdict.Reasons
		if len(why) == 0 {
			why = []string{"the gate did not pass"}
		}
		fail(&c, "verdict", why)
		s.Cases = append(s.Cases, c)
	}
	for _, c := range s.Cases {
		s.Tests++
		if c.Failure != nil {
			s.Failures++
		}
	}
	s.Time = fmt.Sprintf("%.3f", total.Seconds())
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{s}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func anyFailed(cs []junitCase) bool {
	for _, c := range cs {
		if c.Failure != nil {
			return true
		}
	}
	return false
}
