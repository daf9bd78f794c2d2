package lint

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Shells whose PID 1 does not forward SIGTERM (matched on the basename).
var shells = []string{"sh", "bash", "ash", "dash", "zsh", "ksh", "mksh"}

// Regular expressions shared by lint and the policy's CEL (both RE2), so
// the two agree on what they see.
const (
	// reShell matches a shell's path.
	reShell = `^(.*/)?(sh|bash|ash|dash|zsh|ksh|mksh)$`
	// reShellOpts matches one option word that includes -c (-c, -ec, -xc).
	reShellOpts = `^-[a-zA-Z]*c[a-zA-Z]*$`
	// reExec matches a script that runs a command with exec (not exec
	// with only redirections, which keeps the shell).
	reExec = `(^|[;&|\n(])\s*exec\s+(-\S+\s+)*[A-Za-z/."'$_]`
	// reSleepScriptInt matches a script that starts with sleep N, N a
	// whole number with an optional unit (GNU sleep: s, m, h, d).
	reSleepScriptInt = `^\s*sleep\s+[0-9]+[smhd]?\s*($|[;&\n])`
	// reSleepWord finds that sleep and its argument in the script.
	reSleepWord = `sleep\s+[0-9]+[smhd]?`
	// reSleepNumber is a sleep argument's number: decimal digits only, so
	// GNU sleep's `infinity` (and strconv's inf, nan, hex and exponents)
	// is not a length.
	reSleepNumber = `^([0-9]+(\.[0-9]*)?|\.[0-9]+)$`
)

var (
	shellRE       = regexp.MustCompile(reShell)
	shellOptsRE   = regexp.MustCompile(reShellOpts)
	execRE        = regexp.MustCompile(reExec)
	sleepNumberRE = regexp.MustCompile(reSleepNumber)
	sleepScriptRE = regexp.MustCompile(`^\s*sleep\s+([0-9.]+[smhd]?(\s+[0-9.]+[smhd]?)*)\s*($|[;&\n])`)
)

// hookKind is what a preStop hook is, for its length.
type hookKind int

const (
	hookNone    hookKind = iota // no preStop
	hookKnown                   // a length lint can read
	hookUnknown                 // httpGet to an unknown path, a command that is not a sleep
	hookExec                    // exec sleep, known length (distroless matters)
)

// preStopLength reads a container's preStop hook: the sleep action's
// seconds, an exec `sleep N` (or `sh -c "sleep N; …"`, whose first command
// is the sleep), or an httpGet to a path in httpSleeps. The kubelet runs the
// hook, then sends SIGTERM (pkg/kubelet/kuberuntime/kuberuntime_container.go,
// executePreStopHook), so this is how long the app serves before it.
func preStopLength(c *corev1.Container, httpSleeps map[string]time.Duration) (time.Duration, hookKind, string) {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0, hookNone, ""
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		return time.Duration(h.Sleep.Seconds) * time.Second, hookKnown, fmt.Sprintf("sleep action %ds", h.Sleep.Seconds)
	case h.Exec != nil:
		if d, ok := execSleep(h.Exec.Command); ok {
			return d, hookExec, fmt.Sprintf("exec %q", strings.Join(h.Exec.Command, " "))
		}
		return 0, hookUnknown, fmt.Sprintf("exec %q", strings.Join(h.Exec.Command, " "))
	case h.HTTPGet != nil:
		if d, ok := httpSleeps[h.HTTPGet.Path]; ok {
			return d, hookKnown, fmt.Sprintf("httpGet %s (%s by --http-prestop)", h.HTTPGet.Path, d)
		}
		return 0, hookUnknown, "httpGet " + h.HTTPGet.Path
	}
	return 0, hookUnknown, "a hook without an action"
}

// execSleep reads `sleep ARGS` (GNU sleep sums its arguments, each with an
// optional s/m/h/d suffix) or a shell script that starts with it.
func execSleep(argv []string) (time.Duration, bool) {
	if len(argv) == 0 {
		return 0, false
	}
	if path.Base(argv[0]) == "sleep" {
		return sleepArgs(argv[1:])
	}
	if script, ok := shellScript(argv); ok {
		if m := sleepScriptRE.FindStringSubmatch(script); m != nil {
			return sleepArgs(strings.Fields(m[1]))
		}
	}
	return 0, false
}

func sleepArgs(args []string) (time.Duration, bool) {
	if len(args) == 0 {
		return 0, false
	}
	var total time.Duration
	for _, a := range args {
		unit := time.Second
		switch {
		case strings.HasSuffix(a, "s"):
			a = a[:len(a)-1]
		case strings.HasSuffix(a, "m"):
			a, unit = a[:len(a)-1], time.Minute
		case strings.HasSuffix(a, "h"):
			a, unit = a[:len(a)-1], time.Hour
		case strings.HasSuffix(a, "d"):
			a, unit = a[:len(a)-1], 24*time.Hour
		}
		// `sleep infinity` never ends: the kubelet SIGKILLs at the grace
		// period's end, so it is no length to credit.
		if !sleepNumberRE.MatchString(a) {
			return 0, false
		}
		f, err := strconv.ParseFloat(a, 64)
		if err != nil || f < 0 || f*float64(unit) > float64(math.MaxInt64) {
			return 0, false
		}
		total += time.Duration(f * float64(unit))
	}
	return total, true
}

// shellScript returns the script of `SHELL [-opts] -c SCRIPT`.
func shellScript(argv []string) (string, bool) {
	if len(argv) < 3 || !shellRE.MatchString(argv[0]) {
		return "", false
	}
	sawC := false
	i := 1
	for ; i < len(argv) && strings.HasPrefix(argv[i], "-") && !strings.HasPrefix(argv[i], "--"); i++ {
		if shellOptsRE.MatchString(argv[i]) {
			sawC = true
		}
	}
	if !sawC || i >= len(argv) {
		return "", false
	}
	return argv[i], true
}

// shellPID1 says why a container's PID 1 is a shell that will not forward
// SIGTERM, or "" when it is not. Only an explicit command is judged: args
// alone run under the image's entrypoint, which the manifest does not show.
//
// A shell that stays PID 1 has no SIGTERM handler (the kernel drops signals
// to a namespace's PID 1 that it does not handle) and does not pass the
// signal to its child, so the app runs on until the kubelet's SIGKILL.
// Whether `sh -c SCRIPT` stays is the shell's choice: bash and dash replace
// themselves with a lone last simple command, busybox ash depends on its
// build, and a trap, pipeline or later command keeps any of them; `exec`
// makes it explicit.
func shellPID1(c *corev1.Container) string {
	if len(c.Command) == 0 {
		return ""
	}
	argv := append(slices.Clone(c.Command), c.Args...)
	if strings.HasSuffix(argv[0], ".sh") {
		return fmt.Sprintf("PID 1 is the shell script %s: unless it ends in `exec`, the shell keeps SIGTERM from the app", argv[0])
	}
	if !shellRE.MatchString(argv[0]) {
		return ""
	}
	if script, ok := shellScript(argv); ok {
		if execRE.MatchString(script) {
			return ""
		}
		return fmt.Sprintf("PID 1 is `%s -c` running %q without `exec`", path.Base(argv[0]), oneLine(script))
	}
	if len(argv) > 1 && !strings.HasPrefix(argv[1], "-") {
		return fmt.Sprintf("PID 1 is %s running the script %s: unless it ends in `exec`, the shell keeps SIGTERM from the app", path.Base(argv[0]), argv[1])
	}
	return ""
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}
