package faults

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/results"
)

// measureArgs are the flags of a quick, valid run on the local cluster (as
// in measure/e2e's CLI tests).
func measureArgs(extra ...string) []string {
	return append([]string{"measure", "--kubeconfig", cluster.Kubeconfig, "--url", cluster.IngressURL,
		"--ingress-class", ingressClass, "--observer", "skipper", "--observer-url", cluster.RoutesURL,
		"--observer-interval", "200ms", "--quiet-period", "2s", "--rate", "100",
		// No pause before a deletion: these runs are about the signal's
		// phases, not the ingress's.
		"--trial-jitter", "0"}, extra...)
}

// cliRun is one run of bin/epwindow measure with its progress lines.
type cliRun struct {
	cmd   *exec.Cmd
	start time.Time
	done  chan struct{}
	err   error // cmd.Wait's

	mu    sync.Mutex
	lines []stampedLine
}

type stampedLine struct {
	at   time.Duration // since start
	text string
}

// startCLI starts bin/epwindow with args and collects its stderr (the
// progress lines: not a terminal, so one line per change).
func startCLI(t *testing.T, bin string, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, stampedLine{time.Since(r.start), sc.Text()})
			r.mu.Unlock()
		}
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	return r
}

// wait waits for the process to exit; after limit it kills it and fails.
func (r *cliRun) wait(t *testing.T, limit time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(limit):
		_ = r.cmd.Process.Kill()
		<-r.done
		t.Fatalf("epwindow measure still running after %s; killed. stderr:\n%s", limit, r.log())
	}
}

// last is the latest progress line seen so far ("" before any).
func (r *cliRun) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == 0 {
		return ""
	}
	return r.lines[len(r.lines)-1].text
}

func (r *cliRun) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, l := range r.lines {
		fmt.Fprintf(&b, "%8s %s\n", l.at.Round(time.Millisecond), l.text)
	}
	return b.String()
}

// firstLine returns when the first line containing s appeared.
func (r *cliRun) firstLine(s string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if strings.Contains(l.text, s) {
			return l.at, true
		}
	}
	return 0, false
}

// phaseOf names the run's phase from a progress line, e.g.
// "[##########..........] 1/2 trial: slice_not_ready" → "trial".
func phaseOf(line string) string {
	if line == "" {
		return "start" // before any progress: flags, kubeconfig, preflight
	}
	for _, p := range []string{"cleanup", "trial", "steady", "setup"} {
		if strings.Contains(line, "] ") && strings.Contains(line, " "+p) {
			return p
		}
	}
	return "after" // the report, printed after cleanup
}

// exitStatus tells how the process ended: its exit code, or whether
// SIGINT's default action killed it.
func exitStatus(err error) (code int, killedByInterrupt bool) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1, ws.Signal() == syscall.SIGINT
		}
		return ee.ExitCode(), false
	}
	if err != nil {
		return -1, false
	}
	return 0, false
}

// checkResultsFile decodes the results file if the run created it.
func checkResultsFile(t *testing.T, path string) (trials int, created bool) {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file, err := results.Decode(f)
	if err != nil {
		st, _ := f.Stat()
		t.Errorf("results file %s (%d bytes) does not decode: %v", path, st.Size(), err)
		return 0, true
	}
	return len(file.Trials), true
}

// interruptPoint is one moment of TestInterruptEveryPhase: wait until a
// stderr line containing after appears (or, with after "", until the held
// preflight's request arrives), then delay more, then send SIGINT.
type interruptPoint struct {
	name  string
	after string
	delay time.Duration
}

// interruptPoints place one SIGINT in every phase of a 2-trial run, by the
// progress line that opens the phase, so that each phase is hit on every
// run of the test rather than by chance. The bar counts finished trials:
// trial 1 runs under "0/2 trial" and the wait before trial 2 is "1/2
// steady". Phases that last seconds (the first steady state: Skipper's
// 1 s poll and the load reaching every pod; a trial: at least the 2 s
// quiet period after Skipper drops the address) are hit at their start
// and once more 1 s in. Nine runs replace the twenty timed ones and their
// calibration run this test used to make: every phase is still covered,
// now certainly, in under half the time.
var interruptPoints = []interruptPoint{
	{"preflight", "", 0},
	{"setup", "0/2 setup", 0},
	{"first steady state", "0/2 steady", 0},
	{"first steady state, 1s in", "0/2 steady", time.Second},
	{"trial 1 at its deletion", "0/2 trial", 0},
	{"trial 1, 1s in", "0/2 trial", time.Second},
	{"between trials", "1/2 steady", 0},
	{"trial 2 at its deletion", "1/2 trial", 0},
	{"cleanup", "cleanup", 0},
}

// heldURL is a listener that accepts connections and never answers: as
// --url it holds the preflight's request to the ingress open (it gives up
// after 5 s). accepted is closed at the first connection — the preflight
// is running, so main has installed its signal handling.
func heldURL(t *testing.T) (url string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan struct{})
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if len(held) == 0 {
				close(acc)
			}
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String(), acc
}

// waitLine waits until a stderr line containing s appears, or the run
// ends, or limit passes; it reports whether the line came.
func (r *cliRun) waitLine(s string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, ok := r.firstLine(s); ok {
			return true
		}
		select {
		case <-r.done:
			_, ok := r.firstLine(s)
			return ok
		case <-time.After(5 * time.Millisecond):
		}
	}
	return false
}

// A SIGINT in every phase of a run — the preflight, namespace and object
// creation, steady state, mid-trial, between trials, cleanup — always leaves
// the cluster clean, exits 130 (or 0 when the trials had all finished and
// only cleanup was left), never dies of the signal, and keeps every
// finished trial: the results file, if one is left, decodes with
// results.Decode and holds the trials finished before the SIGINT. A
// preflight cut short creates no results file. The phase each SIGINT
// really hit is read from the run's last progress line at that moment,
// and every phase must have been hit.
func TestInterruptEveryPhase(t *testing.T) {
	bin := e2etest.Bin(t)
	began := time.Now()
	hits := map[string]int{}
	for i, pt := range interruptPoints {
		out := filepath.Join(t.TempDir(), "results.jsonl")
		args := measureArgs("--trials", "2", "--out", out)
		var accepted <-chan struct{}
		if pt.after == "" {
			var u string
			u, accepted = heldURL(t)
			args = append(args, "--url", u)
		}
		r := startCLI(t, bin, args...)
		reached := false
		if accepted != nil {
			select {
			case <-accepted:
				reached = true
			case <-r.done:
			case <-time.After(30 * time.Second):
			}
		} else {
			reached = r.waitLine(pt.after, 3*time.Minute)
		}
		if !reached {
			_ = r.cmd.Process.Kill()
			<-r.done
			t.Fatalf("SIGINT %d (%s): the run never reached %q; stderr:\n%s", i+1, pt.name, pt.after, r.log())
		}
		phase, sentAt := "finished", time.Duration(0)
		finishedBefore := 0 // trials finished when the SIGINT was sent
		select {
		case <-r.done:
		case <-time.After(pt.delay):
			phase = phaseOf(r.last())
			if _, ok := r.firstLine("1/2 "); ok {
				finishedBefore = 1
			}
			sentAt = time.Since(r.start)
			if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Fatalf("SIGINT: %v", err)
			}
		}
		// Cleanup waits at most 2 minutes for the namespace to go.
		r.wait(t, 3*time.Minute)
		hits[phase]++
		stopped := time.Since(r.start) - sentAt
		code, killed := exitStatus(r.err)
		trialsKept, created := checkResultsFile(t, out)
		t.Logf("SIGINT %d (%-26s) at %6s in %-8s: exit %d after %s; results file: created %v, %d trials",
			i+1, pt.name, sentAt.Round(time.Millisecond), phase, code, stopped.Round(time.Millisecond), created, trialsKept)
		switch {
		case killed:
			t.Errorf("SIGINT %d (%s, phase %s) killed epwindow: its signal handling was not in place; stderr:\n%s", i+1, pt.name, phase, r.log())
		case code != 0 && code != 130:
			t.Errorf("SIGINT %d (%s, phase %s): exit %d, want 0 or 130; stderr:\n%s", i+1, pt.name, phase, code, r.log())
		case code == 0 && trialsKept != 2:
			t.Errorf("SIGINT %d: exit 0 but the results file holds %d trials, want 2", i+1, trialsKept)
		}
		if phase == "start" && (created || code != 130) {
			t.Errorf("SIGINT %d in the preflight: exit %d, results file created %v; want exit 130 and no file", i+1, code, created)
		}
		// Ctrl-C as trial 2 starts (the point a person hits most): exit
		// 130 and exactly the finished trial kept, the interrupted one not.
		if pt.after == "1/2 trial" && pt.delay == 0 && phase != "finished" && (code != 130 || trialsKept != finishedBefore) {
			t.Errorf("SIGINT %d (%s): exit %d with %d trials kept, want 130 and the %d finished before", i+1, pt.name, code, trialsKept, finishedBefore)
		}
		if trialsKept < finishedBefore {
			t.Errorf("SIGINT %d (%s): the results file holds %d trials; %d had finished before the SIGINT", i+1, pt.name, trialsKept, finishedBefore)
		}
		if ns, pods := leftovers(t); len(ns)+len(pods) > 0 {
			t.Fatalf("SIGINT %d (%s, phase %s) left namespaces %v and probe pods %v; stderr:\n%s", i+1, pt.name, phase, ns, pods, r.log())
		}
	}
	t.Logf("%d SIGINTs by phase: %v; test took %s", len(interruptPoints), hits, time.Since(began).Round(time.Second))
	for _, p := range []string{"start", "setup", "steady", "trial", "cleanup"} {
		if hits[p] == 0 {
			t.Errorf("no SIGINT hit the %s phase (hits: %v)", p, hits)
		}
	}
}
