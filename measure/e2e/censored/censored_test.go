package censored

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/results"
)

// ingressPoll is Skipper's poll of the API server (its
// -source-poll-timeout): longer than the hold by a wide margin.
const (
	ingressPoll = 8 * time.Second
	hold        = 3 * time.Second
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/censored", localcluster.Options{IngressPoll: ingressPoll}, func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// A run whose ingress reprograms less often than --hold: every trial's pod
// is still routed when the hold ends it. Skipper rebuilds its routes once
// per poll, after the previous one finished (zalando/skipper
// dataclients/kubernetes, the -source-poll-timeout loop in routing.go), and
// with --trial-jitter 0 a deletion follows steady state by well under a
// second — steady state being the poll that listed the replacement pod, seen
// by the observer within its 200 ms interval. The next poll, the first
// that can drop the deleted pod, then comes about 7.5 s after T0: more than
// twice the 3 s hold, so the trial is cut there (censored), whatever the
// EndpointSlice controller's latency (tens of ms here). Two trials, because
// the point is the censoring and the exit code, not a distribution: with
// both cut, the largest (the bound of 2 trials) is a censored trial's floor.
// Each trial costs the hold, the release, and one poll for the replacement
// to be routed: about 40 s for the package with the cluster start.
func TestRunIntoHoldIsCensored(t *testing.T) {
	bin := e2etest.Bin(t)
	out := filepath.Join(t.TempDir(), "run.jsonl")
	cmd := exec.Command(bin, "measure", "--kubeconfig", cluster.Kubeconfig, "--url", cluster.IngressURL,
		"--ingress-class", e2etest.IngressClass, "--observer", "skipper", "--observer-url", cluster.RoutesURL,
		"--observer-interval", "200ms", "--rate", "50", "--trials", "2", "--trial-jitter", "0",
		"--hold", hold.String(), "--quiet-period", "1s", "--grace-margin", "5s", "--settle-timeout", "2m", "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := e2etest.ExitCode(cmd.Run())
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	// README "Exit codes": 6, measured but the recommendation is only a
	// lower bound.
	if code != 6 {
		t.Errorf("measure exited %d, want 6 (recommendation only a lower bound)", code)
	}

	f := e2etest.ReadResults(t, out)
	if f.Header == nil || f.Header.Schema != results.SchemaVersion || time.Duration(f.Header.HoldNS) != hold {
		t.Fatalf("header %+v: want schema %d and the hold %s", f.Header, results.SchemaVersion, hold)
	}
	censored := 0
	for _, r := range f.Trials {
		t.Logf("trial %d: %s", r.Trial, r.InvalidReason())
		if !r.Censored() {
			continue
		}
		censored++
		// Censored, not invalid: the window is kept, as a floor.
		if w, ok := r.Window(); !ok || !r.PointValid(results.PointWindow) || w <= 0 {
			t.Errorf("trial %d cut at the hold has no valid window (%v, %v)", r.Trial, w, ok)
		}
	}
	// At least 2: measure runs on until --trials trials have a valid
	// window (a cut one counts), replacing any whose window was lost.
	if len(f.Trials) < 2 || censored == 0 {
		t.Fatalf("%d trials, %d cut at the hold: want at least 2, with at least one cut (Skipper polls every %s, the hold is %s)",
			len(f.Trials), censored, ingressPoll, hold)
	}
	d := f.Summary
	if d == nil || d.Censored != censored || d.InvalidReasons[results.ReasonHoldReached] != censored {
		t.Fatalf("summary %+v: want %d censored, counted under %s", d, censored, results.ReasonHoldReached)
	}
	if w := findDist(d.Stages, results.PointWindow); w.N != 2 || w.Censored != censored {
		t.Errorf("window n=%d censored=%d: want both trials in n, %d censored", w.N, w.Censored, censored)
	}
	if r := d.Recommendation; r == nil || !r.LowerBound() || r.N != 2 || r.Censored != censored {
		t.Errorf("recommendation %+v: want a lower bound over both trials", r)
	}
	for _, want := range []string{"censored at the hold", "= ≥ "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the printed report lacks %q", want)
		}
	}
	if !strings.Contains(stderr.String(), "rerun with --hold") {
		t.Errorf("stderr does not say to rerun with a longer --hold")
	}
}

func findDist(ds []results.Dist, name string) results.Dist {
	for _, d := range ds {
		if d.Name == name {
			return d
		}
	}
	return results.Dist{}
}
