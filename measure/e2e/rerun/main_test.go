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

// trials per run. compare judges a quantile only when at least
// results.MinTailTrials (5) trials of each run lie above it
// (results.Judged): p50 needs 10 valid trials, p95 100 (far too slow
// here), so the verdicts rest on p50. With deletions spread over Skipper's
// cycle (jitter), upstream_removed is about uniform on 0..poll: p50 ≈ 0.5 s
// against ≈ 1.5 s, a 1 s shift between two wide distributions, and the
// percentile bootstrap's 99% interval of a median difference is wide. In
// 200 simulated pairs of runs (results.Compare; phases drawn independently,
// or stratified as measure draws them but blurred by 0..400 ms of the
// trial's own timing; 0..200 ms of observer lag) the shift was judged worse
// in 149 and 175 at 24 trials, 181 and 199 at 32, 188 and 200 at 40; a real
// pair of 24-trial runs was not (p50 0.60 s → 1.47 s, interval from
// −0.11 s). 40 trials take 5 to 7 minutes a run on this shared machine.
const trials = 40

// jitter is --trial-jitter: 3 s is a whole number of cycles of both
// Skipper poll intervals (3 × 1 s, 1 × 3 s), so the stratified pauses put
// the deletions at evenly spread phases of either.
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

// base and slow are the two runs: Skipper polling every 1 s, then every
// 3 s. Nothing else differs between the clusters.
var base, slow run

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
		base.poll, slow.poll = time.Second, 3*time.Second
		for _, r := range []*run{&base, &slow} {
			r.path = filepath.Join(dir, "poll-"+r.poll.String()+".jsonl")
			began := time.Now()
			if err := measureOn(r); err != nil {
				fmt.Fprintf(os.Stderr, "rerun tests need two measured runs on the local cluster (make build cluster): --ingress-poll %s: %v\n", r.poll, err)
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
