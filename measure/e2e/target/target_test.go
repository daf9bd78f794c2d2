// Package target runs measure --target against a team's Deployment on the
// local cluster: the sidecar patched in, pods evicted one at a time, the
// template rolled back. The "app" is the probe itself, so that both
// witnesses stamp the same pod: the probe's own record (its termination
// message) is the ground truth for the sidecar's.
package target

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

// ingressPoll is Skipper's poll of the API server: a deleted pod stays
// routed for up to one poll after its slice says not ready (Skipper
// rebuilds its routes once per poll: zalando/skipper dataclients/kubernetes).
const ingressPoll = time.Second

const (
	ns   = "team"
	app  = "app"
	host = "app.example.test"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	localcluster.Main(m, "measure/e2e/target", localcluster.Options{IngressPoll: ingressPoll}, func(c *localcluster.Cluster) error {
		cluster = c
		return createApp(context.Background(), c)
	})
}

// createApp makes the team's app (3 replicas of the probe as a
// fast-exiting app, no preStop: e2etest.TeamApp) and an Ingress to it.
func createApp(ctx context.Context, c *localcluster.Cluster) error {
	if err := (e2etest.TeamApp{Namespace: ns, Name: app, Replicas: 3}).Create(ctx, c.Client); err != nil {
		return err
	}
	class, prefix := e2etest.IngressClass, networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}, Spec: networkingv1.IngressSpec{
		IngressClassName: &class,
		Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: app, Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}},
	}}
	_, err := c.Client.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
	return err
}

// podRecords watches the team's pods and keeps each one's last state: the
// probe's termination message is in the status the node agent reports as
// the pod ends.
type podRecords struct {
	mu   sync.Mutex
	last map[string]*corev1.Pod
}

func watchPods(t *testing.T, ctx context.Context) *podRecords {
	t.Helper()
	w, err := cluster.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pr := &podRecords{last: map[string]*corev1.Pod{}}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Error {
				pr.mu.Lock()
				pr.last[p.Name] = p
				pr.mu.Unlock()
			}
		}
	}()
	return pr
}

// probeRecord is the app container's own record of pod, from its
// termination message.
func (pr *podRecords) probeRecord(pod string) (*probe.Timeline, error) {
	pr.mu.Lock()
	p := pr.last[pod]
	pr.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("pod %s never seen", pod)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" && cs.State.Terminated != nil {
			tl, err := probe.ParseTimeline([]byte(cs.State.Terminated.Message))
			return &tl, err
		}
	}
	return nil, fmt.Errorf("pod %s: no terminated app container in its last status", pod)
}

// measureTarget runs bin/epwindow measure --target on the app and returns
// its exit code and results.
// route is its load's path (default: through Skipper, observed).
func measureTarget(t *testing.T, trials int, route ...string) (int, *results.File) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run.jsonl")
	if len(route) == 0 {
		route = []string{"--url", cluster.IngressURL, "--observer", "skipper", "--observer-url", cluster.RoutesURL, "--observer-interval", "200ms"}
	}
	args := append([]string{"measure", "--kubeconfig", cluster.Kubeconfig, "--target", "deployment/" + app, "--namespace", ns}, route...)
	if !slices.Contains(route, "--rate") {
		args = append(args, "--rate", "100")
	}
	cmd := exec.Command(e2etest.Bin(t), append(args,
		"--trials", fmt.Sprint(trials), "--trial-jitter", "1s", "--settle-timeout", "2m", "--out", out)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := e2etest.ExitCode(cmd.Run())
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	return code, e2etest.ReadResults(t, out)
}

// checkRolledBack fails unless the Deployment is back to its template: no
// sidecar, no run annotation, every pod of the rollback without it.
func checkRolledBack(t *testing.T, ctx context.Context) {
	t.Helper()
	d, err := cluster.Client.AppsV1().Deployments(ns).Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, run := deploy.TemplateSidecar(d.Spec.Template); c != nil || run != "" || d.Spec.Template.Annotations[deploy.SidecarRunAnnotation] != "" {
		t.Errorf("after the run the template still has the sidecar (%v) or the run's annotation (%q)", c != nil, run)
	}
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Spec.InitContainers {
			if c.Name == deploy.SidecarContainerName {
				t.Errorf("pod %s still runs the sidecar after the rollback", p.Name)
			}
		}
	}
}

// Two runs of 3 trials and three of 2: few, because the point is each
// trial's outcome and its agreement with the probe's record, not a
// distribution; each trial costs about Skipper's poll (or the preStop) and
// a replacement's start, each run two rollouts (the sidecar in and out) of
// 3 replicas: about 4 minutes in all.
func TestTargetDeployment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pr := watchPods(t, ctx)

	// The preStop the first run recommends, applied in the second.
	recommended := time.Duration(0)
	t.Run("no preStop: trials cut at listener_closed, failures counted", func(t *testing.T) {
		_, f := measureTarget(t, 3)
		if rec := results.Summarize(f, results.Options{}).Doc().Recommendation; rec != nil {
			recommended = time.Duration(rec.PreStopSeconds) * time.Second
			t.Logf("recommended preStop %s (a floor: %v)", recommended, rec.LowerBound())
		}
		checkRolledBack(t, ctx)
		if f.Header == nil || f.Header.Target == nil || f.Header.Target.Name != app || f.Header.Mode != "evict" {
			t.Fatalf("header %+v: want the target Deployment and mode evict", f.Header)
		}
		failed := 0
		for _, r := range f.Trials {
			t.Logf("trial %d pod %s: failures %v, reasons %s", r.Trial, r.Pod, r.ClientFailures, r.InvalidReason())
			for _, n := range r.ClientFailures {
				failed += n
			}
			if _, ok := r.Stage(results.StageListenerClosed); !ok {
				t.Errorf("trial %d: no listener_closed stage", r.Trial)
			}
			if !r.Censored() {
				t.Errorf("trial %d: the app exits at SIGTERM while Skipper still routes to it: want the trial censored at listener_closed", r.Trial)
			}
			if r.Sidecar == nil {
				t.Errorf("trial %d: no sidecar account", r.Trial)
			}
		}
		if failed == 0 {
			t.Errorf("no failed request over %d trials of an app that exits at SIGTERM behind a 1 s poll: the failures are the finding", len(f.Trials))
		}
	})

	// The number the tool gave, applied: its floor from censored trials
	// (the largest listener_closed, a few tens of ms, plus the 1 s margin),
	// at least a second more than Skipper's poll here, so the windows fit.
	t.Run("the recommended preStop: windows inside it, the sidecar agrees with the probe", func(t *testing.T) {
		if recommended <= 0 {
			t.Fatal("the first run recommended no preStop")
		}
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","lifecycle":{"preStop":{"sleep":{"seconds":%d}}}}]}}}}`, int(recommended.Seconds()))
		if _, err := cluster.Client.AppsV1().Deployments(ns).Patch(ctx, app, "application/strategic-merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		code, f := measureTarget(t, 3)
		if code != 0 {
			t.Errorf("measure exited %d, want 0", code)
		}
		checkRolledBack(t, ctx)
		for _, r := range f.Trials {
			w, ok := r.Window()
			t.Logf("trial %d pod %s: window %v, failures %v, reasons %s", r.Trial, r.Pod, w, r.ClientFailures, r.InvalidReason())
			if !r.Valid || !ok || w <= 0 || w >= recommended {
				t.Errorf("trial %d: valid %v, window %v; want a valid window inside the %s preStop", r.Trial, r.Valid, w, recommended)
			}
			if len(r.ClientFailures) > 0 {
				t.Errorf("trial %d: failures %v behind a preStop that covers the window", r.Trial, r.ClientFailures)
			}
			checkAgainstProbe(t, pr, r)
		}
	})

	// The other paths and connection reuse, two trials each, checked only
	// against the probe (their windows are the paths' own). Through the
	// ClusterIP with --keepalive kube-proxy pins a connection to its pod:
	// it goes on carrying requests to the evicted pod until the app closes
	// it at SIGTERM, after the preStop, so the window is the preStop; the
	// point is the sidecar's last_request on a connection that stays open.
	svc, err := cluster.Client.CoreV1().Services(ns).Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterIP := []string{"--url", "http://" + svc.Spec.ClusterIP + ":80", "--observer", "none"}
	skipper := []string{"--url", cluster.IngressURL, "--observer", "skipper", "--observer-url", cluster.RoutesURL, "--observer-interval", "200ms"}
	// --rate 0: the app's own clients, here an epwindow load of its own
	// through Skipper that the run knows nothing of. The window comes from
	// the sidecar alone; the run sends nothing and counts no failure.
	t.Run("under the app's own traffic (--rate 0): the sidecar agrees with the probe", func(t *testing.T) {
		clients := exec.CommandContext(ctx, e2etest.Bin(t), "load", "--url", cluster.IngressURL, "--host", host, "--rate", "50",
			"--deadline", "5m", "--stats-listen", "127.0.0.1:0")
		if err := clients.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = clients.Process.Kill(); _ = clients.Wait() }()
		_, f := measureTarget(t, 2, "--observer", "skipper", "--observer-url", cluster.RoutesURL, "--observer-interval", "200ms", "--rate", "0")
		checkRolledBack(t, ctx)
		if f.Header == nil || f.Header.Rate != 0 {
			t.Fatalf("header %+v: want rate 0", f.Header)
		}
		for _, r := range f.Trials {
			w, ok := r.Window()
			t.Logf("trial %d pod %s: window %v %v, reasons %s", r.Trial, r.Pod, w, ok, r.InvalidReason())
			if len(r.ClientFailures) > 0 {
				t.Errorf("trial %d: failures %v from a run that sent nothing", r.Trial, r.ClientFailures)
			}
			checkAgainstProbe(t, pr, r)
		}
	})

	for _, tc := range []struct {
		name  string
		route []string
	}{
		{"through Skipper, keep-alive", append(slices.Clone(skipper), "--keepalive")},
		{"through the ClusterIP, a new connection per request", clusterIP},
		{"through the ClusterIP, keep-alive", append(slices.Clone(clusterIP), "--keepalive")},
	} {
		t.Run(tc.name+": the sidecar agrees with the probe", func(t *testing.T) {
			_, f := measureTarget(t, 2, tc.route...)
			checkRolledBack(t, ctx)
			for _, r := range f.Trials {
				w, ok := r.Window()
				t.Logf("trial %d pod %s: window %v %v, failures %v, reasons %s", r.Trial, r.Pod, w, ok, r.ClientFailures, r.InvalidReason())
				checkAgainstProbe(t, pr, r)
			}
		})
	}
}

// checkAgainstProbe compares the sidecar's stamps with the probe's own, on
// one machine's clock (the tool's clock is the pods' here, so the skew is
// about 0 and its bound small):
//   - last_accept: the sidecar stamps a connection at the end of the first
//     dump that lists it, at most one gap between dumps (MaxGapNS) after
//     the kernel established it; the probe stamps it when Go's accept
//     returns, after the kernel queued it. So sidecar − probe lies in
//     [−(queue wait), MaxGap] ± the skew bound; 5 ms covers the accept
//     queue's wait on this machine at 100 req/s.
//   - last_request: the sidecar sees data only on a connection a dump
//     found open (tcpi_bytes_received grew; a TIME_WAIT entry carries no
//     tcp_info), so with a new connection per request it misses requests on
//     connections that opened and closed between two dumps: those are what
//     last_accept covers. Its instant is the dump less tcpi_last_data_recv,
//     in jiffies (net/ipv4/tcp.c tcp_get_info: up to 10 ms at HZ=100). So
//     it is never later than the probe's by more than a jiffy, a gap and
//     the skew bound.
//   - the window's end, max(last_accept, last_request): as last_accept, or
//     up to a gap early when the last request came on a connection closed
//     before the next dump (below).
func checkAgainstProbe(t *testing.T, pr *podRecords, r results.Record) {
	t.Helper()
	tl, err := pr.probeRecord(r.Pod)
	if err != nil {
		t.Errorf("trial %d: the probe's own record: %v", r.Trial, err)
		return
	}
	if r.Sidecar == nil {
		t.Errorf("trial %d: no sidecar account", r.Trial)
		return
	}
	// Every connection the app accepted on its port is one the sidecar
	// saw or counted unseen: PassiveOpens less the sidecar's own and other
	// ports' (net/ipv4/tcp_minisocks.c counts each accepted one). The
	// sidecar's last dump comes after the app exited (a native sidecar is
	// stopped last), so the count is exact, not a bound.
	unseen := "unknown"
	if u := r.Sidecar.UnseenConnections; u != nil {
		unseen = fmt.Sprint(*u)
		if seen := r.Sidecar.Accepts + *u; seen != tl.Accepts {
			t.Errorf("trial %d: the sidecar saw %d connections and counted %d unseen (%d), the probe accepted %d: want equal",
				r.Trial, r.Sidecar.Accepts, *u, seen, tl.Accepts)
		}
	}
	if tl.LastTrafficAccept == nil {
		// Kept-alive connections pinned to the other pods: no traffic
		// reached this one, and the sidecar must not have seen any either.
		if w, ok := r.Window(); ok {
			t.Errorf("trial %d: the probe served no traffic, the sidecar's window is %v", r.Trial, w)
		}
		t.Logf("trial %d: no traffic reached the pod (probe and sidecar agree; unseen %s)", r.Trial, unseen)
		return
	}
	skew := time.Duration(r.SkewUncertaintyNS)
	gap := time.Duration(r.Sidecar.MaxGapNS)
	jiffy := 10 * time.Millisecond
	acc, okA := r.StageMax(results.StageLastAccept)
	w, okW := r.Window()
	if !okA || !okW {
		t.Errorf("trial %d: no last_accept (%v) or window (%v) from the sidecar", r.Trial, okA, okW)
		return
	}
	low := 5*time.Millisecond + skew
	if d := acc.At.Sub(*tl.LastTrafficAccept); d < -low || d > gap+skew {
		t.Errorf("trial %d: sidecar last_accept − probe's = %v, want within [−%v, %v]", r.Trial, d, low, gap+skew)
	}
	// No last_request when no dump found a connection open with data on it
	// (every request on a connection that came and went between dumps).
	reqDiff := "none seen"
	if req, ok := r.Stage(results.StageLastRequest); ok && tl.LastTrafficRequest != nil {
		d := req.At.Sub(*tl.LastTrafficRequest)
		reqDiff = d.String()
		if d > jiffy+gap+skew {
			t.Errorf("trial %d: sidecar last_request − probe's = %v, want at most %v", r.Trial, d, jiffy+gap+skew)
		}
	}
	probeEnd := tl.LastTrafficAccept
	if tl.LastTrafficRequest != nil && tl.LastTrafficRequest.After(*probeEnd) {
		probeEnd = tl.LastTrafficRequest
	}
	// A request on a kept-alive connection that the app then closed (at
	// SIGTERM) before the next dump is data no dump saw grow: the window's
	// end may be early by up to a gap too. The record's ± (skew + the
	// longest gap) covers both sides.
	end := r.T0.Add(w)
	if d := end.Sub(*probeEnd); d < -(low+jiffy+gap) || d > gap+skew {
		t.Errorf("trial %d: the sidecar's window ends %v from the probe's traffic end, want within [−%v, %v]", r.Trial, d, low+jiffy+gap, gap+skew)
	}
	t.Logf("trial %d: last_accept sidecar−probe %v, last_request %s, window end %v (gap %v, skew ±%v, unseen %s)", r.Trial,
		acc.At.Sub(*tl.LastTrafficAccept), reqDiff, end.Sub(*probeEnd), gap, skew, unseen)
}

// targetArgs are a quick measure --target's arguments (one trial), its
// results in the test's temporary directory.
func targetArgs(t *testing.T, deployment string, extra ...string) []string {
	return append([]string{"measure", "--kubeconfig", cluster.Kubeconfig, "--target", "deployment/" + deployment, "--namespace", ns,
		"--url", cluster.IngressURL, "--observer", "skipper", "--observer-url", cluster.RoutesURL, "--observer-interval", "200ms",
		"--rate", "50", "--trials", "1", "--trial-jitter", "0", "--settle-timeout", "1m",
		"--out", filepath.Join(t.TempDir(), "run.jsonl")}, extra...)
}

// runCLI runs bin/epwindow with args and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(e2etest.Bin(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	code := e2etest.ExitCode(cmd.Run())
	t.Logf("exit %d:\n%s", code, out.String())
	return code, out.String()
}

// Bad input fails with the fix named, and leaves the Deployment as it was:
// a Deployment that does not exist; one another run has its sidecar in (a
// second measure --target); a PodDisruptionBudget that never allows an
// eviction (the eviction waits, is not forced, and the run ends naming the
// budget after --eviction-wait, the sidecar taken out); and Ctrl-C in the
// middle of a trial (the sidecar taken out, the template rolled back).
// Each costs at most two rollouts of 3 replicas.
func TestTargetBadInputLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	t.Run("no such Deployment", func(t *testing.T) {
		code, out := runCLI(t, targetArgs(t, "nope")...)
		if code != 2 || !bytes.Contains([]byte(out), []byte("--target deployment/nope")) {
			t.Errorf("exit %d, want 2 naming --target", code)
		}
	})

	t.Run("a second run on the same Deployment", func(t *testing.T) {
		// What a running (or killed) measure --target leaves in the template.
		busy := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"run123"}},"spec":{"initContainers":[{"name":%q,"image":%q,"command":["epwindow","sidecar","--port=8080"],"restartPolicy":"Always"}]}}}}`,
			deploy.SidecarRunAnnotation, deploy.SidecarContainerName, deploy.DefaultImage)
		patchApp(t, ctx, []byte(busy))
		before := templateOf(t, ctx)
		code, out := runCLI(t, targetArgs(t, app)...)
		if code == 0 || !bytes.Contains([]byte(out), []byte("run123")) {
			t.Errorf("exit %d, want a failure naming the other run", code)
		}
		if after := templateOf(t, ctx); after != before {
			t.Errorf("the refused run changed the Deployment's template")
		}
		patchApp(t, ctx, deploy.SidecarRemovePatch())
		waitRolledOut(t, ctx)
	})

	t.Run("an admission policy that refuses the sidecar", func(t *testing.T) {
		denySidecar(t, ctx)
		before := templateOf(t, ctx)
		code, out := runCLI(t, targetArgs(t, app)...)
		// Refused by admission, not for a missing permission: a failed run
		// (README's exit 1), the policy's own message in the error.
		if code != 1 || !strings.Contains(out, "admission policy") || !strings.Contains(out, "no epwindow sidecar in this namespace") {
			t.Errorf("exit %d, want 1 naming the admission policy and its message", code)
		}
		if after := templateOf(t, ctx); after != before {
			t.Errorf("the refused run changed the Deployment's template")
		}
	})

	t.Run("a PodDisruptionBudget that allows no eviction", func(t *testing.T) {
		three := intstr.FromInt32(3)
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "all", Namespace: ns},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &three, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
		if _, err := cluster.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer cluster.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "all", metav1.DeleteOptions{})
		code, out := runCLI(t, targetArgs(t, app, "--eviction-wait", "15s")...)
		if code == 0 || !bytes.Contains([]byte(out), []byte("PodDisruptionBudget")) {
			t.Errorf("exit %d, want a failure naming the PodDisruptionBudget", code)
		}
		checkRolledBack(t, ctx)
	})

	t.Run("Ctrl-C in a trial", func(t *testing.T) {
		var out syncBuffer
		cmd := exec.Command(e2etest.Bin(t), targetArgs(t, app, "--trials", "5")...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// Interrupt once the first eviction was sent: the sidecar is in.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var err error
	wait:
		for !strings.Contains(out.String(), "evicting") {
			select {
			case err = <-exited:
				t.Fatalf("measure ended before its first eviction: %v\n%s", err, out.String())
			case <-ctx.Done():
				break wait
			case <-tick.C:
			}
		}
		_ = cmd.Process.Signal(os.Interrupt)
		err = <-exited
		code := e2etest.ExitCode(err)
		t.Logf("exit %d:\n%s", code, out.String())
		if code != 130 {
			t.Errorf("exit %d after Ctrl-C, want 130", code)
		}
		checkRolledBack(t, ctx)
	})
}

// syncBuffer is a bytes.Buffer the command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// denySidecar installs a ValidatingAdmissionPolicy that refuses the
// sidecar in the team's Deployments, as a platform may, and removes it when
// the test ends. A new policy takes a moment to be enforced: it waits until
// a dry-run patch with the sidecar is refused.
func denySidecar(t *testing.T, ctx context.Context) {
	t.Helper()
	a := cluster.Client.AdmissionregistrationV1()
	deny := admissionregistrationv1.Deny
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "no-sidecars"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.spec.template.spec.initContainers) || object.spec.template.spec.initContainers.all(c, c.name != '" + deploy.SidecarContainerName + "')",
				Message:    "no epwindow sidecar in this namespace"}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "no-sidecars"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "no-sidecars",
			ValidationActions: []admissionregistrationv1.ValidationAction{deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}}}
	if _, err := a.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf(`{"spec":{"template":{"spec":{"initContainers":[{"name":%q,"image":"x","restartPolicy":"Always"}]}}}}`, deploy.SidecarContainerName)
	// refused waits until a dry-run patch with the sidecar is refused
	// (want true) or accepted: the policy's informer follows its changes.
	refused := func(want bool) {
		for {
			_, err := cluster.Client.AppsV1().Deployments(ns).Patch(ctx, app, types.StrategicMergePatchType, []byte(probe),
				metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			if (err != nil) == want {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the admission policy never came to refuse=%v: %v", want, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	t.Cleanup(func() {
		_ = a.ValidatingAdmissionPolicyBindings().Delete(context.Background(), "no-sidecars", metav1.DeleteOptions{})
		_ = a.ValidatingAdmissionPolicies().Delete(context.Background(), "no-sidecars", metav1.DeleteOptions{})
		refused(false)
	})
	refused(true)
}

func patchApp(t *testing.T, ctx context.Context, patch []byte) {
	t.Helper()
	if _, err := cluster.Client.AppsV1().Deployments(ns).Patch(ctx, app, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// templateOf is the Deployment's pod template, as JSON.
func templateOf(t *testing.T, ctx context.Context) string {
	t.Helper()
	d, err := cluster.Client.AppsV1().Deployments(ns).Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(d.Spec.Template)
	return string(b)
}

// waitRolledOut waits until the Deployment's current template is rolled out.
func waitRolledOut(t *testing.T, ctx context.Context) {
	t.Helper()
	for {
		d, err := cluster.Client.AppsV1().Deployments(ns).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := d.Status
		if s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == *d.Spec.Replicas && s.Replicas == s.UpdatedReplicas && s.AvailableReplicas == s.UpdatedReplicas {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("deployment %s not rolled out: %+v", app, s)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
