package rerun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/localcluster"
)

// ingressClass is the class Skipper serves on the local cluster
// (deploy/local/skipper: -kubernetes-ingress-class=^skipper$).
const ingressClass = "skipper"

// trials of each real run, and their cost. compare's power is tested on
// simulated runs in results (TestCompareFamilyWiseFalseAlarms,
// TestCompareSeesSlowModeInTail); here two real runs check the verdict end
// to end: Skipper polling every 1 s, then every 4 s, must make the window
// worse. 20 trials a run is what docs/compare.md says a shift of the whole
// window needs, and the least that gives the tail test room: with 1 s
// against 4 s polls about 3 in 4 of the new run's windows lie above the
// baseline's largest, so the 10 largest of the 40 pooled trials are all
// the new run's in most pairs, p ≈ 2·10⁻⁴ against the window tail test's
// 1.25% — a margin of fifty, not luck. At 10 a run the same split gives
// p ≈ 0.02, over the limit. Cost on this machine (2 cores): about 4 s a
// trial polling every second, 6–7 s every 4 s, plus a cluster start each
// (Skipper's --source-poll-timeout is a process flag: the poll cannot change
// without restarting Skipper, and the local cluster starts in seconds, so
// a second start costs less than a trial or two): about 3.5 minutes in all.
const trials = 20

// jitter is --trial-jitter: 1 s is a whole number of the 1 s poll's
// cycles and a quarter of the 4 s one's, so the stratified pauses spread
// the deletions over the poll's phases at 0.5 s a trial on average.
const jitter = "1s"

// run is one measured results file.
type run struct {
	// poll is Skipper's --ingress-poll on the cluster it was measured on.
	poll time.Duration
	// path is the results file (JSON lines from measure --out).
	path string
	// output is measure's standard output (its own report) and stderr.
	output string
}

// base is the baseline: Skipper polling every 1 s; slow the new run:
// every 4 s.
var base, slow run

// bin is bin/epwindow, built by make build; the local cluster's node agent
// runs the probe pods from the same directory.
var bin string

func TestMain(m *testing.M) {
	// Namespaces of its own: its two clusters run beside other packages'.
	localcluster.Isolate()
	os.Exit(func() int {
		var err error
		if bin, err = filepath.Abs("../../../bin/epwindow"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := os.Stat(bin); err != nil {
			fmt.Fprintf(os.Stderr, "%s missing: run make build (and make cluster for bin/epwindow-local)\n", bin)
			return 1
		}
		dir, err := os.MkdirTemp("", "epwindow-rerun-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		base.poll, slow.poll = time.Second, 4*time.Second
		for _, r := range []*run{&base, &slow} {
			r.path = filepath.Join(dir, "poll-"+r.poll.String()+".jsonl")
			began := time.Now()
			if err := measureOn(r); err != nil {
				fmt.Fprintf(os.Stderr, "rerun tests need measured runs on the local cluster (make build cluster): --ingress-poll %s: %v\n", r.poll, err)
				return 1
			}
			fmt.Fprintf(os.Stderr, "measured %d trials with --ingress-poll %s in %s\n", trials, r.poll, time.Since(began).Round(time.Second))
		}
		return m.Run()
	}())
}

// measureOn starts a local cluster whose Skipper polls every r.poll, runs
// bin/epwindow measure against it into r.path, and stops the cluster.
func measureOn(r *run) (retErr error) {
	// In the package's own namespaces (TestMain) Start waits for no other
	// package; 20 minutes bounds the start and the run.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{IngressPoll: r.poll})
	if err != nil {
		return fmt.Errorf("start local cluster: %w", err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("stop local cluster: %w", err))
		}
	}()
	cmd := exec.CommandContext(ctx, bin, "measure", "--kubeconfig", c.Kubeconfig,
		"--url", c.IngressURL, "--ingress-class", ingressClass,
		"--observer", "skipper", "--observer-url", c.RoutesURL, "--observer-interval", "200ms",
		"--quiet-period", "1s", "--rate", "100", "--trials", strconv.Itoa(trials), "--trial-jitter", jitter, "--out", r.path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	r.output = out.String()
	if err != nil {
		return fmt.Errorf("epwindow measure: %w\n%s", err, r.output)
	}
	return nil
}

// epwindow runs bin/epwindow with args and returns its stdout, stderr and
// exit code (-1 when it could not run).
func epwindow(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s %v: %v", bin, args, err)
	}
	return o.String(), e.String(), code
}
