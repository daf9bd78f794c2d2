package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/kubeapply"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/internal/testcert"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	localcluster.Main(m, "monitor/e2e", localcluster.Options{}, func(c *localcluster.Cluster) error {
		if c.IngressInClusterURL == "" {
			return errors.New("the READY line names no ingress-in-cluster URL: the schedule's pod cannot reach Skipper")
		}
		cluster = c
		return nil
	})
}

// The schedule's numbers. A run times runTrials deletions, every minute
// ("* * * * *", the CronJob's finest schedule); on this cluster a run of 5
// takes about 35 s, so runs do not overlap before the slow mode.
//
// The slow mode is a validating admission webhook that holds every
// EndpointSlice update in the schedule's namespace that takes a ready
// endpoint out, for slowWrite, before allowing it: the EndpointSlice
// controller's update for a deleted pod then reaches the API (and Skipper's
// next poll) that much later, as on a cluster with a slow webhook. Every
// deletion's window grows by at least slowWrite less the preStop's lag (see
// the alert's value below), above every window seen here with no change
// (under 4 s: Skipper's 3 s poll, the slice update, the request in flight).
//
// The metrics server's drift test (the flags manifests --schedule passes
// to history --serve): a reference of baselineTrials (the first two runs),
// blocks of windowTrials (one run each). What the two rules then predict,
// from the tests' exact sizes (results' tail test: k new windows all above
// the n reference ones has p = 1/C(n+k, k); no quantile is judged at these
// sizes, so the tail test runs at the window's whole level, 2.5%; the
// reference is split by runs into the screen's half and the
// confirmation's):
//
//   - No change (runs 1–3): runs 1 and 2 fill the reference; run 3 is
//     screened against run 1 and called suspect only if, by chance, 4 of
//     its windows lie above all 5 of run 1's: 1/126 as its fourth trial
//     lands, 1/252 more at its fifth, under 1.2% in all; nothing can be
//     worse before a confirmation on later runs. Run 3, like the
//     reference at 20%, joins it: the screen's half is then runs 1 and 3
//     (10 trials), the confirmation's run 2 (5). The bound, the largest of
//     the newest windows, under 4 s, stays under documented, and so does
//     the recommended preStop (the bound plus 1 s of margin, rounded up:
//     at most 5 s). Neither alert may go pending.
//   - The slow mode, from run 4 (the first run started after the webhook):
//     EpwindowWindowExceedsDocumentedPreStop goes pending with its first
//     trial (the bound is at least the largest window, the recommendation
//     above the bound). Run 4 is suspect once its windows lie above the
//     screen half's 10 (p = 1/3003 at its fifth), and run 5 confirms it
//     against run 2 at its fifth trial (the confirmation's last look, at a
//     quarter of 2.5%: p = 1/252 = 0.4%): EpwindowWindowWorse goes pending
//     within the second run after the slow mode (the power is 1). Each
//     fires after its `for: 1m`. An alert that went pending later, or not
//     at all, fails.
//
// The test waits on the CronJob's minute: the first run comes at the first
// minute boundary after the schedule is applied, then one a minute, and the
// rules' minute follows the fifth: about 7 minutes.
const (
	runTrials      = 5
	baselineTrials = 10
	windowTrials   = 5
	documented     = 6 * time.Second
	slowWrite      = 9 * time.Second
)

const (
	boundAlert = "EpwindowWindowExceedsDocumentedPreStop"
	driftAlert = "EpwindowWindowWorse"
)

func TestScheduledRunsAlertOnASlowMode(t *testing.T) {
	bin := e2etest.Bin(t)
	const ns = "epw-schedule"
	out, err := exec.Command(bin, "manifests", "--schedule", "* * * * *", "--namespace", ns,
		"--trials", strconv.Itoa(runTrials), "--ingress-class", "skipper", "--image", "epwindow:latest",
		"--keep-runs", "0", "--keep-for", "0", "--documented-prestop", documented.String(), "--metrics-refresh", "2s",
		"--baseline-trials", strconv.Itoa(baselineTrials), "--window-trials", strconv.Itoa(windowTrials),
		"--", "--url", cluster.IngressInClusterURL, "--observer", "none").Output()
	if err != nil {
		t.Fatalf("epwindow manifests --schedule: %v", err)
	}
	if err := kubeapply.Create(context.Background(), cluster.Config, out); err != nil {
		t.Fatalf("apply the schedule: %v", err)
	}
	dir := historyDir(t, ns)

	// Prometheus scrapes the schedule's own metrics server (history
	// --serve in its pod, the one deploy/monitoring's PodMonitor selects)
	// at its pod address, as a PodMonitor makes it.
	prom := prometheus(t, historyServer(t, ns))

	// No change: three whole runs, the third judged against the
	// reference the first two make; neither alert ever pending.
	deadline := time.Now().Add(5 * time.Minute)
	for succeeded(t, ns) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("three scheduled runs did not succeed in 5 min; runs: %v", runFiles(t, dir))
		}
		time.Sleep(2 * time.Second)
		for _, name := range []string{boundAlert, driftAlert} {
			if a := alertOf(prom, name); a != nil {
				t.Fatalf("with no change %s is %s (value %s); runs: %v", name, a.State, a.Value, runFiles(t, dir))
			}
		}
	}
	bound, err := settled(prom, "epwindow_window_bound_seconds")
	if err != nil || bound <= 0 || bound >= documented.Seconds() {
		t.Fatalf("after runs with no change, epwindow_window_bound_seconds = %v (%v), want a bound under the documented %s", bound, err, documented)
	}
	if same, err := scalar(prom, `epwindow_drift_verdict{verdict="same"}`); err != nil || same != 1 {
		t.Fatalf("the third run with no change is not judged the same as the reference (verdict same = %v, %v)", same, err)
	}
	if n, err := scalar(prom, "epwindow_baseline_trials"); err != nil || n != baselineTrials/2 {
		t.Errorf("epwindow_baseline_trials = %v (%v), want the screen's half of the %d-trial reference", n, err, baselineTrials)
	}
	t.Logf("no change: runs of %d trials, bound %.3fs under the documented %s, the third run judged the same as the reference, no alert", runTrials, bound, documented)
	// The run's own cost, from its summary: what it asked of the API
	// server, and a peak RSS within the CronJob's memory limit (256Mi,
	// deploy/schedule/cronjob.yaml), which a real kubelet enforces.
	if n, err := settled(prom, "sum(epwindow_run_api_requests)"); err != nil || n <= 0 {
		t.Errorf("epwindow_run_api_requests sums to %v (%v), want the finished run's requests", n, err)
	}
	if rss, err := settled(prom, "epwindow_run_peak_rss_bytes"); err != nil || rss <= 0 || rss >= 256<<20 {
		t.Errorf("epwindow_run_peak_rss_bytes = %v (%v), want the run's peak, under its 256Mi limit", rss, err)
	}

	// The slow mode.
	calls := slowWebhook(t, ns, slowWrite)
	injected := time.Now()
	deadline = injected.Add(7 * time.Minute)
	pendingRuns := map[string]int{}
	fired := map[string]*alert{}
	for len(fired) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("within 7 min of the slow mode (%d slowed writes) only %v fired; runs: %v", calls.Load(), fired, runFiles(t, dir))
		}
		time.Sleep(2 * time.Second)
		for _, name := range []string{boundAlert, driftAlert} {
			a := alertOf(prom, name)
			if a == nil {
				continue
			}
			if _, seen := pendingRuns[name]; !seen {
				pendingRuns[name] = runsSince(t, dir, injected)
				t.Logf("%s %s at %s after the slow mode, %d run(s) started since", name, a.State, time.Since(injected).Round(time.Second), pendingRuns[name])
			}
			if a.State == "firing" && fired[name] == nil {
				fired[name] = a
				t.Logf("%s fired %s after the slow mode, value %s", name, time.Since(injected).Round(time.Second), a.Value)
			}
		}
	}
	// A run that started before the webhook (the CronJob starts a run due
	// while the previous one was still going as soon as it ends) may go
	// pending already: fewer runs since is early, not late.
	for name, within := range map[string]int{boundAlert: 1, driftAlert: 2} {
		if runs := pendingRuns[name]; runs > within {
			t.Errorf("%s went pending with %d runs started since the slow mode, want within %d", name, runs, within)
		}
	}
	// The bound alert's value is the preStop the slowed run recommends,
	// above its bound: the window after the preStop call, so the hold less
	// the time from the EndpointSlice controller's sight of the deletion to
	// the node agent's preStop call (both watch the same pod update: tens
	// of ms here; 1 s is far above it).
	if v, err := strconv.ParseFloat(fired[boundAlert].Value, 64); err != nil || v < (slowWrite-time.Second).Seconds() {
		t.Errorf("%s's value %s, want the slowed run's recommendation, above the %s the webhook holds each slice write", boundAlert, fired[boundAlert].Value, slowWrite)
	}
	if calls.Load() == 0 {
		t.Errorf("the webhook held no EndpointSlice write")
	}
}

// settled is query's value once the finished run's file has reached it: a
// refresh of the metrics server (2 s) and a scrape (1 s) after the Job
// succeeded, waited for up to 15 s.
func settled(base, query string) (float64, error) {
	time.Sleep(3 * time.Second)
	for end := time.Now().Add(12 * time.Second); ; time.Sleep(time.Second) {
		v, err := scalar(base, query)
		if err == nil || time.Now().After(end) {
			return v, err
		}
	}
}

// alertOf is the alert of that name when pending or firing, nil
// otherwise.
func alertOf(base, name string) *alert {
	as, err := alerts(base)
	if err != nil {
		return nil // the server is starting
	}
	for i, a := range as {
		if a.Labels["alertname"] == name {
			return &as[i]
		}
	}
	return nil
}

// historyServer waits for the schedule's metrics server to be ready and
// returns its metrics port's address.
func historyServer(t *testing.T, ns string) string {
	t.Helper()
	sel := "app.kubernetes.io/name=" + deploy.HistoryServerName
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		pods, err := cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Status.PodIP != "" && podReady(&pods.Items[0]) {
			return net.JoinHostPort(pods.Items[0].Status.PodIP, "9090")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the history's metrics server (%s) is not ready after 2 min: %v %+v", sel, err, pods)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// historyDir waits for the schedule's claim to bind and returns where its
// PersistentVolume (one of up's hostPath volumes) lies on this machine.
func historyDir(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		pvc, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "epwindow-history", metav1.GetOptions{})
		if err == nil && pvc.Status.Phase == corev1.ClaimBound {
			pv, err := cluster.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil || pv.Spec.HostPath == nil {
				t.Fatalf("the claim's volume %s: %v (%+v)", pvc.Spec.VolumeName, err, pv)
			}
			return pv.Spec.HostPath.Path
		}
		if time.Now().After(deadline) {
			t.Fatalf("the history claim is not bound after a minute: %v %+v", err, pvc)
		}
	}
}

// succeeded counts the schedule's Jobs that succeeded.
func succeeded(t *testing.T, ns string) int {
	jobs, err := cluster.Client.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range jobs.Items {
		if j.Status.Succeeded > 0 {
			n++
		}
		if j.Status.Failed > 0 {
			t.Fatalf("scheduled run %s failed; its log is under %s", j.Name, filepath.Join(cluster.Dir, "nodes", "pods"))
		}
	}
	return n
}

func runFiles(t *testing.T, dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "run-*.jsonl"))
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// runsSince counts the runs that started after at, from their names
// (run-20261205T180000Z.jsonl: the start, UTC, to the second).
func runsSince(t *testing.T, dir string, at time.Time) int {
	n := 0
	for _, f := range runFiles(t, dir) {
		ts, err := time.Parse("20060102T150405Z", strings.TrimSuffix(strings.TrimPrefix(f, "run-"), ".jsonl"))
		if err != nil {
			t.Fatalf("run file %s: %v", f, err)
		}
		if !ts.Before(at.Truncate(time.Second)) {
			n++
		}
	}
	return n
}

// slowWebhook registers a validating webhook, served here over TLS on
// loopback, that holds every EndpointSlice update in ns that takes a ready
// endpoint out of service (a deleted pod's) for delay, and allows every
// write. Only those: the run's setup and the replacements' returns are not
// slowed, so the first slowed trial comes as soon as the run's setup is
// done. It returns the count of writes held; the
// registration is removed when the test ends.
func slowWebhook(t *testing.T, ns string, delay time.Duration) *atomic.Int64 {
	t.Helper()
	cert, caFile := testcert.SelfSigned(t, "127.0.0.1")
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "want an AdmissionReview", http.StatusBadRequest)
			return
		}
		if takesOut(review.Request.OldObject.Raw, review.Request.Object.Raw) {
			calls.Add(1)
			time.Sleep(delay)
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	url := "https://" + ln.Addr().String() + "/slow"
	fail := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(delay/time.Second) + 5
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "epwindow-e2e-slow-slices"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "slow-slices.epwindow.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"discovery.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"endpointslices"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	api := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := api.Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the slow webhook: %v", err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })
	return &calls
}

// takesOut reports whether an EndpointSlice update (old → new, as JSON)
// makes an endpoint that was ready not ready, or removes it.
func takesOut(oldRaw, newRaw []byte) bool {
	var before, after discoveryv1.EndpointSlice
	if len(oldRaw) == 0 || json.Unmarshal(oldRaw, &before) != nil || json.Unmarshal(newRaw, &after) != nil {
		return false
	}
	ready := func(e discoveryv1.Endpoint) bool { return e.Conditions.Ready == nil || *e.Conditions.Ready }
	now := map[string]bool{}
	for _, e := range after.Endpoints {
		for _, a := range e.Addresses {
			now[a] = ready(e)
		}
	}
	for _, e := range before.Endpoints {
		for _, a := range e.Addresses {
			if ready(e) && !now[a] {
				return true
			}
		}
	}
	return false
}
