package clusterip

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/results"
)

// cluster is the package's local cluster: kube-proxy in nftables mode at
// its default --min-sync-period, 1 s (package slow runs 4 s).
var cluster *localcluster.Cluster

// period is this package's kube-proxy --min-sync-period.
const period = time.Second

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/clusterip", Options(period), func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// Ground truth at 1 s: cluster_last_routed − slice_not_ready stays within
// kube-proxy's period (see CheckGroundTruth for the bound from its source).
// That the delays follow the period is shown at 4 s (package slow), where
// they reach beyond this package's bound.
func TestGroundTruth1s(t *testing.T) {
	stop := Churn(t, cluster.Client)
	defer stop()
	recs := Run(t, Config(t, cluster, 10, period))
	delays := CheckGroundTruth(t, recs, period, 0)
	t.Logf("cluster_last_routed − slice_not_ready at --min-sync-period %s: %v", period, delays)
	checkRunnerAndProbeAgree(t, recs)
}

// Two measures of one path agree: each runner's cluster_last_routed (its
// last response from the deleted pod, on the runner's clock) and the
// probe's last_accept from the runner's address (on the probe's clock),
// each put on the tool's clock with its own pod's skew estimate. This
// checks the skew correction across two pods' clocks, on
// TestGroundTruth1s's run.
//
// The runner stamps its response's first byte, the probe its accept of
// that connection, earlier by the connect's last leg, the request and the
// answer: the runner's own exchange span, which the stage's uncertainty
// already carries (see measure.clusterStages). Beyond the two skew bounds
// the slack is 20 ms: a runner's connections are 10 ms apart, and under
// load on two cores the probe's accept loop and the runner's read may each
// run a few ms late; the last accept may belong to a connection whose
// response the runner filed as failed (reset by the probe's release),
// one interval earlier than its last success — or later, hence the bound
// on both sides.
func checkRunnerAndProbeAgree(t *testing.T, recs []*results.Record) {
	t.Helper()
	const agreeSlack = 20 * time.Millisecond
	for _, r := range recs {
		if len(r.Runners) != Nodes {
			t.Errorf("trial %d: runners %+v, want %d", r.Trial, r.Runners, Nodes)
			continue
		}
		nodes := map[string]bool{}
		for _, rn := range r.Runners {
			nodes[rn.Node] = true
			if rn.Note != "" || rn.IP == "" {
				t.Errorf("trial %d: runner %s: note %q ip %q", r.Trial, rn.Pod, rn.Note, rn.IP)
				continue
			}
			cl, ok := r.StageKey(results.StageClusterLastRouted, rn.Key())
			if !ok {
				t.Errorf("trial %d: no cluster_last_routed for %s", r.Trial, rn.Key())
				continue
			}
			// kube-proxy DNATs pod → ClusterIP → pod without SNAT: the probe
			// sees the runner's own address.
			la, ok := r.StageKey(results.StageLastAccept, rn.IP)
			if !ok {
				t.Errorf("trial %d: the probe recorded no peer %s (runner %s); peers: %v", r.Trial, rn.IP, rn.Pod, lastAcceptKeys(r))
				continue
			}
			bound := time.Duration(cl.UncertaintyNS+la.UncertaintyNS) + agreeSlack
			if d := cl.At.Sub(la.At); d < -bound || d > bound {
				t.Errorf("trial %d runner %s: cluster_last_routed %s vs last_accept[%s] %s: %s apart, bound ±%s",
					r.Trial, rn.Pod, cl.At.Format(time.RFC3339Nano), rn.IP, la.At.Format(time.RFC3339Nano), d, bound)
			}
		}
		if len(nodes) != Nodes {
			t.Errorf("trial %d: runners on nodes %v, want one on each of %d", r.Trial, nodes, Nodes)
		}
	}
	// The report puts the two paths side by side.
	s := results.NewSummary(nil, results.Options{})
	for _, r := range recs {
		s.Add(r)
	}
	s.Close()
	if len(s.Doc().Paths) != 2 || s.Doc().Paths[1].Last.N == 0 {
		t.Errorf("summary paths %+v", s.Doc().Paths)
	}
}

func lastAcceptKeys(r *results.Record) []string {
	var out []string
	for _, s := range r.Instances(results.StageLastAccept) {
		out = append(out, s.Key)
	}
	return out
}

// Ctrl-C during a trial of a run with runners, in an existing namespace
// (where nothing goes with the namespace): epwindow exits 130 and no runner
// pod, nor anything else of the run, is left.
func TestCLIInterruptLeavesNoRunner(t *testing.T) {
	ctx := context.Background()
	const ns = "epwindow-clusterip-interrupt"
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	bin := e2etest.Bin(t)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	cmd := exec.Command(bin, "measure", "--kubeconfig", cluster.Kubeconfig, "--url", cluster.IngressURL,
		"--ingress-class", e2etest.IngressClass, "--observer", "skipper", "--observer-url", cluster.RoutesURL,
		"--observer-interval", "200ms", "--trials", "3", "--quiet-period", "2s", "--trial-jitter", "0s",
		"--in-cluster-load", "2", "--in-cluster-rate", "50", "-n", ns, "--out", out)
	// Mid-trial: the runners are up (steady state needs them).
	sent, code, log := e2etest.InterruptAt(t, cmd, "0/3 trial: ", 5*time.Minute)
	if !sent {
		t.Fatalf("no SIGINT sent: the first trial never started (exit %d); log:\n%s", code, log)
	}
	if code != 130 {
		t.Errorf("exit code %d after SIGINT, want 130; log:\n%s", code, log)
	}
	// Cleanup waited for the pods to go before exiting: nothing is left now.
	if left := e2etest.RunLeftovers(t, cluster.Client, ns); len(left) != 0 {
		t.Errorf("left in %s after Ctrl-C: %v", ns, left)
	}
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: deploy.LabelName + "=" + deploy.RunnerNameValue})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("runner pods left: %d (%v)", len(pods.Items), err)
	}
}
