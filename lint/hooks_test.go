package lint

import (
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestExecSleep: what lint reads as a preStop's length. `sleep infinity`
// (GNU sleep's forever) and strconv's other non-numbers (nan, inf, hex,
// exponents) are no length.
func TestExecSleep(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want time.Duration
		ok   bool
	}{
		{[]string{"sleep", "5"}, 5 * time.Second, true},
		{[]string{"/bin/sleep", "1m"}, time.Minute, true},
		{[]string{"sleep", "0.5", "2s"}, 2500 * time.Millisecond, true},
		{[]string{"sh", "-c", "sleep 5; kill 1"}, 5 * time.Second, true},
		{[]string{"sh", "-e", "-c", "sleep 2m && kill 1"}, 2 * time.Minute, true},
		{[]string{"sleep", "infinity"}, 0, false},
		{[]string{"sleep", "inf"}, 0, false},
		{[]string{"sleep", "nan"}, 0, false},
		{[]string{"sleep", "NaN"}, 0, false},
		{[]string{"sleep", "0x10"}, 0, false},
		{[]string{"sleep", "1e3"}, 0, false},
		{[]string{"sleep", "99999999999999999999h"}, 0, false},
		{[]string{"sh", "-c", "sleep infinity"}, 0, false},
		{[]string{"sleep"}, 0, false},
	} {
		got, ok := execSleep(tc.argv)
		if got != tc.want || ok != tc.ok {
			t.Errorf("execSleep(%q) = %s, %v; want %s, %v", tc.argv, got, ok, tc.want, tc.ok)
		}
	}
}

// TestShellPID1: options before -c (sh -e -c) are still a shell script.
func TestShellPID1(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		bad  bool
	}{
		{[]string{"sh", "-c", "app"}, true},
		{[]string{"sh", "-e", "-c", "app"}, true},
		{[]string{"/bin/bash", "-x", "-c", "app", "name"}, true},
		{[]string{"sh", "-ec", "app"}, true},
		{[]string{"sh", "-e", "-c", "exec app"}, false},
		{[]string{"sh", "run.sh"}, true},
		{[]string{"sh", "-e"}, false},
		{[]string{"app"}, false},
	} {
		c := &corev1.Container{Command: tc.argv}
		if got := shellPID1(c) != ""; got != tc.bad {
			t.Errorf("shellPID1(%q) = %v, want %v", tc.argv, got, tc.bad)
		}
	}
}

// TestSleepRegexpsAgree: the integer forms the policy's CEL reads are forms
// lint reads, with the same length (the CEL regexps are RE2, as Go's).
func TestSleepRegexpsAgree(t *testing.T) {
	script := regexp.MustCompile(reSleepScriptInt)
	word := regexp.MustCompile(reSleepWord)
	for _, s := range []string{"sleep 5", "sleep 5s; kill 1", " sleep 2m && x", "sleep 1h\nx", "sleep 1d"} {
		if !script.MatchString(s) || word.FindString(s) == "" {
			t.Errorf("%q: the policy's regexps do not read it", s)
		}
		if _, ok := execSleep([]string{"sh", "-c", s}); !ok {
			t.Errorf("%q: the policy reads it, lint does not", s)
		}
	}
	for _, s := range []string{"sleep infinity", "sleep nan", "sleep 0.5", "sleep 5 5"} {
		if script.MatchString(s) {
			t.Errorf("%q: the policy reads it as whole seconds", s)
		}
	}
}
