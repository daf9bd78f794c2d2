package lint

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestExecSleep: what lint reads as a preStop's length, GNU sleep's way
// (arguments summed, fractions, s/m/h/d, a leading --). `sleep infinity`
// (GNU sleep's forever), strconv's other non-numbers (nan, inf, hex,
// exponents) and lengths of maxSleep or more are no length.
func TestExecSleep(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want time.Duration
		ok   bool
	}{
		{[]string{"sleep", "5"}, 5 * time.Second, true},
		{[]string{"/bin/sleep", "1m"}, time.Minute, true},
		{[]string{"sleep", "0.5", "2s"}, 2500 * time.Millisecond, true},
		{[]string{"sleep", ".5", "2.", "0.05m"}, 5500 * time.Millisecond, true},
		{[]string{"sleep", "--", "3"}, 3 * time.Second, true},
		{[]string{"sleep", "1", "--", "2"}, 0, false},
		{[]string{"sleep", "--"}, 0, false},
		{[]string{"sleep", "0001.5d"}, 36 * time.Hour, true},
		{[]string{"sh", "-c", "sleep 5; kill 1"}, 5 * time.Second, true},
		{[]string{"sh", "-e", "-c", "sleep 2m && kill 1"}, 2 * time.Minute, true},
		{[]string{"sh", "-c", "sleep 0.5 2.5\nkill 1"}, 3 * time.Second, true},
		{[]string{"sh", "-c", "/bin/sleep -- 1 1"}, 2 * time.Second, true},
		{[]string{"bash", "-e", "-u", "-x", "-v", "-o", "pipefail", "-c", "sleep 3"}, 3 * time.Second, true},
		{[]string{"sh", "-c", "sleep 1.5.5"}, 0, false},
		{[]string{"sh", "-c", "sleep 3 & kill 1"}, 0, false},
		{[]string{"sh", "-c", "sleep 3 || kill 1"}, 3 * time.Second, true},
		{[]string{"sh", "-c", "/opt/v1.2/sleep 3"}, 0, false},
		{[]string{"sh", "-c", "sleep 5 | x"}, 0, false},
		{[]string{"sh", "sleep 5"}, 0, false}, // a script file named "sleep 5"
		{[]string{"sleep", "infinity"}, 0, false},
		{[]string{"sleep", "inf"}, 0, false},
		{[]string{"sleep", "nan"}, 0, false},
		{[]string{"sleep", "NaN"}, 0, false},
		{[]string{"sleep", "0x10"}, 0, false},
		{[]string{"sleep", "1e3"}, 0, false},
		{[]string{"sleep", "."}, 0, false},
		{[]string{"sleep", "5x"}, 0, false},
		{[]string{"sleep", "99999999999999999999h"}, 0, false},
		{[]string{"sleep", "104166d"}, 104166 * 24 * time.Hour, true}, // 8.99995e18 ns
		{[]string{"sleep", "104167d"}, 0, false},                      // 9.0000288e18 ns ≥ maxSleep
		{[]string{"sleep", "100000d", "5000d"}, 0, false},             // each below, the sum not
		{[]string{"sleep", "123456789012345678901"}, 0, false},        // 21 digits
		{[]string{"sh", "-c", "sleep infinity"}, 0, false},
		{[]string{"sleep"}, 0, false},
		{[]string{"sleep/", "5"}, 0, false},
	} {
		got, ok := execSleep(tc.argv)
		if got != tc.want || ok != tc.ok {
			t.Errorf("execSleep(%q) = %s, %v; want %s, %v", tc.argv, got, ok, tc.want, tc.ok)
		}
	}
}

// TestShellClasses: the letters the options parse on (lint and the
// policy's CEL both).
func TestShellClasses(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"sh", "-c", "app"}, "xcx"},
		{[]string{"bash", "-lc", "app", "$0", "arg"}, "xcxxx"},
		{[]string{"bash", "--login", "+x", "-o", "pipefail", "-ec", "app"}, "xooaxcx"},
		{[]string{"bash", "-co", "pipefail", "app"}, "xAxx"},
		{[]string{"bash", "-O", "extglob", "--rcfile", "rc", "-c", "app"}, "xaxaxcx"},
		{[]string{"sh", "-c", "--", "app"}, "xcex"},
		{[]string{"sh", "-", "run.sh"}, "xex"},
		{[]string{"sh", "-e", "-o", "-c", "run.sh"}, "xoacx"},
	} {
		if got := shellClasses(tc.argv); got != tc.want {
			t.Errorf("shellClasses(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

// TestShellPID1: a shell is PID 1 with a -c script that does not exec,
// whatever options come before it, or with a script file.
func TestShellPID1(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		bad  bool
	}{
		{[]string{"sh", "-c", "app"}, true},
		{[]string{"sh", "-e", "-c", "app"}, true},
		{[]string{"/bin/bash", "-x", "-c", "app", "name"}, true},
		{[]string{"sh", "-ec", "app"}, true},
		{[]string{"bash", "-lc", "app"}, true},
		{[]string{"bash", "-lc", "exec app --flag \"$X\""}, false},
		{[]string{"sh", "-e", "-u", "-x", "-v", "-f", "-c", "app"}, true},
		{[]string{"sh", "-e", "-u", "-x", "-v", "-f", "-c", "exec app"}, false},
		{[]string{"sh", "-c", ""}, true},
		{[]string{"sh", "-c", "exec >/dev/null; app"}, true},
		{[]string{"sh", "-c", "--", "app"}, true},
		{[]string{"sh", "-c", "--", "exec app"}, false},
		{[]string{"bash", "-o", "pipefail", "-c", "app"}, true},
		{[]string{"bash", "-o", "pipefail", "-c", "exec app"}, false},
		{[]string{"bash", "--login", "-c", "app"}, true},
		{[]string{"sh", "+x", "-c", "exec app"}, false},
		{[]string{"sh", "-e", "-c", "exec app"}, false},
		{[]string{"sh", "run.sh"}, true},
		{[]string{"sh", "-e", "run.sh"}, true},
		{[]string{"/run.sh"}, true},
		{[]string{"sh", "-c"}, false},
		{[]string{"sh", "-e"}, false},
		{[]string{"app"}, false},
	} {
		c := &corev1.Container{Command: tc.argv}
		if got := shellPID1(c) != ""; got != tc.bad {
			t.Errorf("shellPID1(%q) = %v, want %v", tc.argv, got, tc.bad)
		}
	}
}

// TestAnnotationDuration: what lint and the policy take as an in-app delay
// or a stream drain; the rest is EPW011 in lint and no delay in both.
func TestAnnotationDuration(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"15s", 15 * time.Second, true},
		{".5s", 500 * time.Millisecond, true},
		{"+1h2m3s4ms", time.Hour + 2*time.Minute + 3*time.Second + 4*time.Millisecond, true},
		{"0", 0, true},
		{"99999h", 99999 * time.Hour, true},
		{"000099999h", 99999 * time.Hour, true},
		{"1.5µs", 1500, true},
		{"100000h", 0, false},
		{"1h1h1h1h1h", 0, false},
		{"-1s", 0, false},
		{"-0s", 0, false},
		{"1.5", 0, false},
		{"15 s", 0, false},
		{"", 0, false},
	} {
		got, ok := annotationDuration(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("annotationDuration(%q) = %s, %v; want %s, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}
