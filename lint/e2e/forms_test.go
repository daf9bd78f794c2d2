package e2e

import (
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	"github.com/epwindow/epwindow/lint"
)

// form is one way of writing a preStop or a command, and the verdict lint
// and the policy must both give it: the one rule it breaks, or "" when
// both admit it.
type form struct {
	name string
	want string
	edit func(*appsv1.Deployment)
}

// forms are the corners where lint and the policy once read differently
// (fractions and several sleep arguments, sleep's --, shells with many
// options or options with arguments, an empty script, long and + options,
// the end of options), each near the boundary the target draws: preStop
// 3s, drain 2s, headroom 5s, so a grace period of 10 s. Each breaks at
// most one rule, so the refusal names all there is.
func forms(target lint.Target) []form {
	grace := func(s int64) func(*appsv1.Deployment) {
		return func(d *appsv1.Deployment) { d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(s) }
	}
	delay := func(v string, then func(*appsv1.Deployment)) func(*appsv1.Deployment) {
		return func(d *appsv1.Deployment) {
			then(d)
			d.Spec.Template.Annotations = map[string]string{lint.AnnotationShutdownDelay: v}
		}
	}
	both := func(fs ...func(*appsv1.Deployment)) func(*appsv1.Deployment) {
		return func(d *appsv1.Deployment) {
			for _, f := range fs {
				f(d)
			}
		}
	}
	tail := target.TailSeconds()
	return []form{
		// GNU sleep: fractions, several arguments summed, units.
		{"sleep 0.5 2.5s", "", execPreStop("sleep", "0.5", "2.5s")},
		{"sleep 0.5 2s", lint.RulePreStopShort, execPreStop("sleep", "0.5", "2s")},
		{"sleep 2.999999999", lint.RulePreStopShort, execPreStop("sleep", "2.999999999")},
		{"sleep .5 2. 0.5", "", execPreStop("sleep", ".5", "2.", "0.5")},
		{"sleep 0.05m", "", execPreStop("sleep", "0.05m")},
		{"sleep 3.5, grace for 3 s", lint.RuleGraceShort, execPreStop("sleep", "3.5")},
		{"sleep 3.5, grace for 4 s", "", both(execPreStop("sleep", "3.5"), grace(4+tail))},
		{"sleep 3.000000001, grace for 3 s", lint.RuleGraceShort, execPreStop("/bin/sleep", "3.000000001")},
		{"sleep 0.0001d 0.0001h 0.01m", "", both(execPreStop("sleep", "0.0001d", "0.0001h", "0.01m"), grace(10+tail))},
		{"sleep 50000d", lint.RuleGraceShort, execPreStop("sleep", "50000d")},
		{"sleep 50000d, its grace", "", both(execPreStop("sleep", "50000d"), grace(50000*86400+tail))},
		// No length: EPW004 in both.
		{"sleep 104167d (past 285 years)", lint.RulePreStopUnknown, execPreStop("sleep", "104167d")},
		{"sleep 100000d 5000d (the sum past)", lint.RulePreStopUnknown, execPreStop("sleep", "100000d", "5000d")},
		{"sleep of 21 digits", lint.RulePreStopUnknown, execPreStop("sleep", "123456789012345678901")},
		{"sleep 1e3", lint.RulePreStopUnknown, execPreStop("sleep", "1e3")},
		{"sleep 3 x", lint.RulePreStopUnknown, execPreStop("sleep", "3", "x")},
		{"sleep 1.5.5", lint.RulePreStopUnknown, execPreStop("sleep", "1.5.5")},
		{"sleep -- 3", "", execPreStop("sleep", "--", "3")},
		{"sleep --", lint.RulePreStopUnknown, execPreStop("sleep", "--")},
		{"sleep 1 -- 2", lint.RulePreStopUnknown, execPreStop("sleep", "1", "--", "2")},
		{"sleep/ 3", lint.RulePreStopUnknown, execPreStop("sleep/", "3")},
		// The in-app delay adds to a fractional sleep.
		{"sleep 2.5 + delay .5s", "", delay(".5s", execPreStop("sleep", "2.5"))},
		{"sleep 2.4 + delay 500ms", lint.RulePreStopShort, delay("500ms", execPreStop("sleep", "2.4"))},
		{"sleep 2 + delay 1.5s, grace for 4 s", "", delay("1.5s", both(execPreStop("sleep", "2"), grace(4+tail)))},
		{"sleep 2 + delay 1.5s, grace for 3 s", lint.RuleGraceShort, delay("1.5s", execPreStop("sleep", "2"))},
		// Annotations past 4 parts of 5 digits are no duration in both
		// (lint adds EPW011, which the policy does not claim); below,
		// the nanoseconds add up without overflow.
		{"sleep 2 + delay 100000h (none)", lint.RulePreStopShort, delay("100000h", execPreStop("sleep", "2"))},
		{"sleep 2 + delay 1h1h1h1h1h (none)", lint.RulePreStopShort, delay("1h1h1h1h1h", execPreStop("sleep", "2"))},
		{"sleep 2 + delay 99999h, its grace", "", delay("99999h", both(execPreStop("sleep", "2"), grace(99999*3600+2+tail)))},
		{"stream-drain 4×99999h", lint.RuleGraceShort, func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{lint.AnnotationStreamDrain: "99999h99999h99999h99999h"}
		}},
		// The sleep a shell script starts with.
		{"sh -ec 'sleep 1.5 1.5; kill 1'", "", execPreStop("sh", "-ec", "sleep 1.5 1.5; kill 1")},
		{"bash -lc 'sleep 2'", lint.RulePreStopShort, execPreStop("bash", "-lc", "sleep 2")},
		{"sh -c 'sleep -- 3 && x'", "", execPreStop("sh", "-c", "sleep -- 3 && x")},
		{"sh -c '/bin/sleep 3'", "", execPreStop("sh", "-c", "/bin/sleep 3")},
		{"sh -c 'sleep 3 | x'", lint.RulePreStopUnknown, execPreStop("sh", "-c", "sleep 3 | x")},
		{"sh -c 'sleep 3 & x' (in the background)", lint.RulePreStopUnknown, execPreStop("sh", "-c", "sleep 3 & x")},
		{"sh -c 'sleep infinity'", lint.RulePreStopUnknown, execPreStop("sh", "-c", "sleep infinity")},
		{"bash, 6 option words, sleep 3", "", execPreStop("bash", "-e", "-u", "-x", "-v", "-o", "pipefail", "-c", "sleep 3")},
		{"sh with a script file", lint.RulePreStopUnknown, execPreStop("sh", "sleep 3")},
		// PID 1.
		{"sh, 5 options, -c app", lint.RuleShellPID1, command("sh", "-e", "-u", "-x", "-v", "-f", "-c", "epwindow probe")},
		{"sh, 5 options, -c exec app", "", command("sh", "-e", "-u", "-x", "-v", "-f", "-c", "exec epwindow probe")},
		{"sh -c ''", lint.RuleShellPID1, command("sh", "-c", "")},
		{"sh -c (no script)", "", command("sh", "-c")},
		{"bash -lc app", lint.RuleShellPID1, command("bash", "-lc", "epwindow probe")},
		{"bash -lc exec app with args", "", command("bash", "-lc", `exec epwindow probe --listen ":$PORT"`, "probe")},
		{"sh -c 'exec >log; app'", lint.RuleShellPID1, command("sh", "-c", "exec >/tmp/log; epwindow probe")},
		{"sh -c -- app", lint.RuleShellPID1, command("sh", "-c", "--", "epwindow probe")},
		{"sh -c -- 'exec app'", "", command("sh", "-c", "--", "exec epwindow probe")},
		{"bash -o pipefail -c app", lint.RuleShellPID1, command("bash", "-o", "pipefail", "-c", "epwindow probe")},
		{"bash -o pipefail -c 'exec app'", "", command("bash", "-o", "pipefail", "-c", "exec epwindow probe")},
		{"bash -co pipefail 'exec app'", "", command("bash", "-co", "pipefail", "exec epwindow probe")},
		{"bash --login -c app", lint.RuleShellPID1, command("bash", "--login", "-c", "epwindow probe")},
		{"sh +x -c 'exec app'", "", command("sh", "+x", "-c", "exec epwindow probe")},
		{"sh -e run.sh", lint.RuleShellPID1, command("sh", "-e", "run.sh")},
		{"command sh, args -c app", lint.RuleShellPID1, func(d *appsv1.Deployment) {
			app(d).Command, app(d).Args = []string{"/bin/sh"}, []string{"-c", "epwindow probe"}
		}},
		{"args alone: sh -c app", "", func(d *appsv1.Deployment) {
			app(d).Command, app(d).Args = nil, []string{"sh", "-c", "epwindow probe"}
		}},
	}
}

// ruleIDRE finds the rule IDs a refusal names.
var ruleIDRE = regexp.MustCompile(`EPW[0-9]{3}`)

// verdict is "admitted", or the rules found, in order, without repeats.
func verdict(rules []string) string {
	if len(rules) == 0 {
		return "admitted"
	}
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(rules))), ",")
}
