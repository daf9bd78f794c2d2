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

// trials of the one real run: enough for the plumbing (measure writes a
// file that report renders in every format and compare reads, verdicts
// and exit codes included), not for compare's statistics. Whether compare
// finds a changed --ingress-poll is a question of power, answered on
// simulated runs in results (TestComparePowerOnSimulatedRuns): on the
// local cluster it took two runs of 40 trials, 5 to 7 minutes each. Six
// trials with --trial-jitter meet Skipper's 1 s poll at spread phases and
// take about a minute.
const trials = 6

// jitter is --trial-jitter: 3 s is a whole number of Skipper's 1 s poll
// cycles, so the stratified pauses put the deletions at evenly spread
// phases of it.
const jitter = "3s"

// run is one measured results file.
type run struct {
	// poll is Skipper's --ingress-poll on the cluster it was measured on.
	poll time.Duration
	// path is the results file (JSON lines from measure --out).
	path string
	// output is measure's standard output (its own report) and stderr.
	output string
}

// base is the run: Skipper polling every 1 s.
var base run

// bin is bin/epwindow, built by make build; the local cluster's node agent
// runs the probe pods from the same directory.
var bin string

func TestMain(m *testing.M) {
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
		base.poll = time.Second
		base.path = filepath.Join(dir, "poll-"+base.poll.String()+".jsonl")
		began := time.Now()
		if err := measureOn(&base); err != nil {
			fmt.Fprintf(os.Stderr, "rerun tests need a measured run on the local cluster (make build cluster): --ingress-poll %s: %v\n", base.poll, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "measured %d trials with --ingress-poll %s in %s\n", trials, base.poll, time.Since(began).Round(time.Second))
		return m.Run()
	}())
}

// measureOn starts a local cluster whose Skipper polls every r.poll, runs
// bin/epwindow measure against it into r.path, and stops the cluster.
func measureOn(r *run) (retErr error) {
	// Start waits for any other package's local cluster to stop first
	// (they share the pod network); 20 minutes covers another e2e package
	// finishing its run.
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
		"--quiet-period", "2s", "--rate", "100", "--trials", strconv.Itoa(trials), "--trial-jitter", jitter, "--out", r.path)
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
