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

// Regular expressions shared by lint and the policy's CEL (both RE2: CEL's
// matches, find and findAll are Go's regexp), so the two read the same
// words the same way.
const (
	// reShell matches a shell's path.
	reShell = `^(.*/)?(sh|bash|ash|dash|zsh|ksh|mksh)$`
	// reSleep matches sleep's path.
	reSleep = `^(.*/)?sleep$`
	// reExec matches a script that runs a command with exec (not exec
	// with only redirections, which keeps the shell).
	reExec = `(^|[;&|\n(])\s*exec\s+(-\S+\s+)*[A-Za-z/."'$_]`
	// reSleepScript matches a script that starts with sleep and its
	// arguments (an optional leading --), up to the end of that command:
	// ;, &&, || or a newline, not & (the sleep would run in the background
	// and the hook go on at once) nor | (not worth the reading).
	// sleep's path holds no digit or dot, which reSleepWord would take
	// for an argument.
	reSleepScript = `^\s*([A-Za-z_/-]*/)?sleep\s+(--\s+)?[0-9.]+[smhd]?(\s+[0-9.]+[smhd]?)*\s*($|;|&&|\|\||\n)`
	// reSleepWord finds sleep's arguments in what reSleepScript matched
	// (neither sleep nor the separators hold a digit or a dot).
	reSleepWord = `[0-9.]+[smhd]?`
	// reSleepArg is one sleep argument lint and the policy read: a decimal
	// number (digits only, so GNU sleep's `infinity` and strconv's inf,
	// nan, hex and exponents are no length) with an optional s/m/h/d
	// unit. At most 20 digits before the point: anything longer is past
	// maxSleep anyway, and the bound keeps CEL's double() from overflowing
	// (an error there would refuse instead of saying EPW004).
	reSleepArg = `^(0*[0-9]{1,20}(\.[0-9]*)?|\.[0-9]+)[smhd]?$`
	// reDuration is an annotation's duration: a Go duration
	// (time.ParseDuration; CEL's duration() parses with it too), not
	// negative, of at most 4 parts of at most 5 digits before the point
	// (99999h is 11 years): so it and its sum with --headroom fit Go's
	// time.Duration, where CEL would fail to evaluate and refuse.
	reDuration = `^\+?(((0*[0-9]{1,5}(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)){1,4}|0)$`
)

// maxSleep bounds the sleeps lint and the policy read, in nanoseconds as
// a float64: a sleep of 285 years or more is no length (EPW004), like
// `sleep infinity`. Below it a length and a sum of lengths fit an int64
// both in Go's time.Duration and in CEL's int, which raises an error on
// overflow where Go wraps.
const maxSleep = 9e18

// sleepUnits are the nanoseconds of GNU sleep's units (none means s).
var sleepUnits = map[byte]float64{'s': 1e9, 'm': 60e9, 'h': 3600e9, 'd': 86400e9}

var (
	shellRE       = regexp.MustCompile(reShell)
	sleepRE       = regexp.MustCompile(reSleep)
	execRE        = regexp.MustCompile(reExec)
	sleepScriptRE = regexp.MustCompile(reSleepScript)
	sleepWordRE   = regexp.MustCompile(reSleepWord)
	sleepArgRE    = regexp.MustCompile(reSleepArg)
	durationRE    = regexp.MustCompile(reDuration)
)

// annotationDuration reads an annotation's duration as the policy does:
// reDuration, then time.ParseDuration.
func annotationDuration(v string) (time.Duration, bool) {
	if !durationRE.MatchString(v) {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	return d, err == nil
}

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
		d := time.Duration(math.MaxInt64) // saturate as the policy does; Go would wrap
		if h.Sleep.Seconds <= int64(math.MaxInt64/time.Second) {
			d = time.Duration(h.Sleep.Seconds) * time.Second
		}
		return d, hookKnown, fmt.Sprintf("sleep action %ds", h.Sleep.Seconds)
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

// execSleep reads `sleep [--] ARGS` (GNU sleep sums its arguments, each
// with an optional s/m/h/d unit) or a shell script that starts with it.
func execSleep(argv []string) (time.Duration, bool) {
	if len(argv) == 0 {
		return 0, false
	}
	if sleepRE.MatchString(argv[0]) {
		args := argv[1:]
		if len(args) > 0 && args[0] == "--" {
			args = args[1:]
		}
		return sleepArgs(args)
	}
	if script, ok := shellScript(argv); ok {
		return sleepArgs(sleepWordRE.FindAllString(sleepScriptRE.FindString(script), -1))
	}
	return 0, false
}

// sleepArgs sums sleep's arguments as the policy's CEL does (cel.sleepNS):
// each one's float64 nanoseconds truncated to an integer, none of them nor
// their sum at maxSleep or more.
func sleepArgs(args []string) (time.Duration, bool) {
	if len(args) == 0 {
		return 0, false
	}
	ns := make([]int64, 0, len(args))
	for _, a := range args {
		if !sleepArgRE.MatchString(a) {
			return 0, false
		}
		unit, num := sleepUnits['s'], a
		if u, ok := sleepUnits[a[len(a)-1]]; ok {
			unit, num = u, a[:len(a)-1]
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || f*unit >= maxSleep {
			return 0, false
		}
		ns = append(ns, int64(f*unit))
	}
	var fsum float64
	var total time.Duration
	for _, n := range ns {
		fsum += float64(n)
		total += time.Duration(n)
	}
	if fsum >= maxSleep {
		return 0, false
	}
	return total, true
}

// Each word of a shell's argv has a class, one letter, so that one regular
// expression over the letters parses the options (the policy's CEL maps the
// words to the same letters; it has no loops). The classes, first match
// wins:
//
//	e  -- or -, the end of the options
//	A  an option cluster with c and o or O (-co NAME): -c, and the next word is o's
//	a  an option that takes the next word: -o NAME, +o, -O (bash's shopt),
//	   a cluster ending in one (-eo pipefail), --rcfile/--init-file FILE
//	c  a cluster with c: -c, -ec, -lc
//	o  any other option: -e, +x, --login
//	x  anything else: the script, a script file, $0 and the arguments
//
// (bash, parse_shell_options in shell.c, and dash, options.c, read o's
// argument from the next word wherever o is in the cluster.)
var shellWordClasses = []struct {
	class string
	re    string
}{
	{"e", `^--?$`},
	{"A", `^-[a-zA-Z]*(c[a-zA-Z]*[oO]|[oO][a-zA-Z]*c)[a-zA-Z]*$`},
	{"a", `^([-+][a-zA-Z]*[oO][a-zA-Z]*|--rcfile|--init-file)$`},
	{"c", `^-[a-zA-Z]*c[a-zA-Z]*$`},
	{"o", `^[-+]`},
}

const (
	// reShellOperand matches the classes up to the shell's first operand,
	// its last letter: the script after -c, else a script file.
	reShellOperand = `^x([oc]|[aA].)*(e.|x)`
	// reShellCommand matches when that operand is a -c script.
	reShellCommand = `^x([oc]|[aA].)*(c|A.)([oc]|[aA].)*(e.|x)`
)

var (
	shellOperandRE = regexp.MustCompile(reShellOperand)
	shellCommandRE = regexp.MustCompile(reShellCommand)
	shellClassRE   = func() []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, c := range shellWordClasses {
			out = append(out, regexp.MustCompile(c.re))
		}
		return out
	}()
)

// shellClasses is argv's class letters, argv[0] included (a shell's path
// is x).
func shellClasses(argv []string) string {
	var b strings.Builder
	for _, w := range argv {
		class := "x"
		for i, re := range shellClassRE {
			if re.MatchString(w) {
				class = shellWordClasses[i].class
				break
			}
		}
		b.WriteString(class)
	}
	return b.String()
}

// shellOperand is the first operand of `SHELL [options] OPERAND …` and
// whether it is a -c script (else a script file); ok is false when argv is
// no shell or has no operand.
func shellOperand(argv []string) (operand string, command, ok bool) {
	if len(argv) == 0 || !shellRE.MatchString(argv[0]) {
		return "", false, false
	}
	classes := shellClasses(argv)
	m := shellOperandRE.FindString(classes)
	if m == "" {
		return "", false, false
	}
	return argv[len(m)-1], shellCommandRE.MatchString(classes), true
}

// shellScript returns the script of `SHELL [options] -c SCRIPT`.
func shellScript(argv []string) (string, bool) {
	s, command, ok := shellOperand(argv)
	return s, ok && command
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
	operand, command, ok := shellOperand(argv)
	switch {
	case !ok:
		return ""
	case !command:
		return fmt.Sprintf("PID 1 is %s running the script %s: unless it ends in `exec`, the shell keeps SIGTERM from the app", path.Base(argv[0]), operand)
	case execRE.MatchString(operand):
		return ""
	}
	return fmt.Sprintf("PID 1 is `%s -c` running %q without `exec`", path.Base(argv[0]), oneLine(operand))
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}
