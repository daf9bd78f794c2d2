package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/lint"
)

var cluster *localcluster.Cluster

// One node: the test creates Deployments of 0 replicas, so no pod runs.
func TestMain(m *testing.M) {
	localcluster.Main(m, "lint/e2e", localcluster.Options{Nodes: 1}, func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// warnings records the API server's Warning headers (client-go's
// rest.WarningHandler), as kubectl would print them.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

func suffix(t *testing.T) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// deployment is compliant with target but for its grace period: a port, a
// readiness probe, a preStop sleep action of the target's length, no shell.
// Zero replicas: admission is about the object, no pod needs to run.
func deployment(name string, target lint.Target, grace int64) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(grace),
					Containers: []corev1.Container{{
						Name: "app", Image: "epwindow:latest", Command: []string{"epwindow", "probe"},
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
							Sleep: &corev1.SleepAction{Seconds: target.PreStopSeconds()}}},
					}},
				},
			},
		},
	}
}

// TestPolicyAndLiveLint runs every check in one cluster start: Deny
// refuses the short grace period with the rule's message and admits the
// compliant Deployment and a waived one, Warn admits the bad one with a
// warning, and lint --cluster finds the bad live object (and only it).
func TestPolicyAndLiveLint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	warn := &warnings{}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WarningHandler = warn
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target := lint.Target{PreStop: 3 * time.Second, Drain: 2 * time.Second, Headroom: 5 * time.Second, From: "e2e"}
	want := target.GraceSeconds(0) // 3 + 2 + 5 = 10
	ns, binding := applyPolicy(ctx, t, cs, "lint-e2e", target)
	vapb := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()

	deps := cs.AppsV1().Deployments(ns)
	bad := deployment("bad", target, want-2)
	good := deployment("good", target, want)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	// The policy takes effect asynchronously: the admission plugin's
	// informers must see policy and binding, and the policy is compiled
	// and type-checked first. Poll with dry runs (they pass admission) until
	// the bad Deployment is refused.
	var refusal error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, refusal = deps.Create(ctx, bad, dryRun)
		return refusal != nil, nil
	}); err != nil {
		t.Fatalf("the Deny policy never refused a grace period of %ds (need %ds) within a minute", want-2, want)
	}
	msg := refusal.Error()
	for _, s := range []string{"EPW005 grace-too-short", "terminationGracePeriodSeconds 8 < ", "set terminationGracePeriodSeconds: 10"} {
		if !strings.Contains(msg, s) {
			t.Errorf("refusal %q lacks %q", msg, s)
		}
	}
	for _, r := range lint.Rules {
		if r.ID != lint.RuleGraceShort && strings.Contains(msg, r.ID) {
			t.Errorf("refusal names %s too, though the Deployment only breaks %s: %s", r.ID, lint.RuleGraceShort, msg)
		}
	}
	if _, err := deps.Create(ctx, bad, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "EPW005") {
		t.Errorf("Deny: creating the bad Deployment: want a refusal naming EPW005, got %v", err)
	}
	if _, err := deps.Create(ctx, good, metav1.CreateOptions{}); err != nil {
		t.Errorf("Deny refuses the compliant Deployment: %v", err)
	}
	waived := deployment("waived", target, want-2)
	waived.Annotations = map[string]string{lint.WaiverPrefix + lint.RuleGraceShort: "drains in 1 s, measured"}
	if _, err := deps.Create(ctx, waived, dryRun); err != nil {
		t.Errorf("Deny refuses a Deployment that waives %s with a reason: %v", lint.RuleGraceShort, err)
	}
	if w := warn.take(); len(w) > 0 {
		t.Errorf("Deny mode sent warnings: %q", w)
	}

	// Warn: the bad Deployment is admitted, with the rule's message as a
	// warning. Poll again: the binding's update reaches the plugin through
	// its informer.
	b, err := vapb.Get(ctx, binding.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.ValidationActions = []admissionv1.ValidationAction{admissionv1.Warn}
	if _, err := vapb.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := deps.Create(ctx, bad, dryRun)
		return err == nil, nil
	}); err != nil {
		t.Fatal("the binding switched to Warn still refuses after a minute")
	}
	warn.take()
	if _, err := deps.Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Warn refuses the bad Deployment: %v", err)
	}
	w := warn.take()
	if len(w) == 0 || !strings.Contains(strings.Join(w, "\n"), "EPW005 grace-too-short") {
		t.Errorf("Warn: want a warning naming EPW005 grace-too-short, got %q", w)
	}

	lintCluster(t, ns)
}

// lintCluster runs the built binary's lint --cluster on ns: exit 3 and one
// finding, EPW005 on the bad Deployment; the compliant one and the
// ReplicaSets the Deployment controller made are not reported.
func lintCluster(t *testing.T, ns string) {
	t.Helper()
	cmd := exec.Command(e2etest.Bin(t), "lint", "--cluster", "-n", ns, "--kubeconfig", cluster.Kubeconfig,
		"--prestop", "3s", "--drain", "2s", "--headroom", "5s", "--format", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("lint --cluster: want exit 3 (findings), got %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var rep struct {
		Workloads int            `json:"workloads"`
		Findings  []lint.Finding `json:"findings"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("lint --cluster --format json: %v\n%s", err, stdout.String())
	}
	if rep.Workloads != 2 {
		t.Errorf("lint --cluster checked %d workloads, want 2 (bad and good; their ReplicaSets belong to them)", rep.Workloads)
	}
	if len(rep.Findings) != 1 {
		t.Fatalf("lint --cluster: want one finding, got %+v", rep.Findings)
	}
	f := rep.Findings[0]
	if f.Rule != lint.RuleGraceShort || f.Kind != "Deployment" || f.Namespace != ns || f.ObjName != "bad" || f.Location() != ns+"/bad" {
		t.Errorf("lint --cluster: want EPW005 on Deployment %s/bad, got %+v", ns, f)
	}
	if f.Field != "spec.template.spec.terminationGracePeriodSeconds" {
		t.Errorf("finding field %q, want spec.template.spec.terminationGracePeriodSeconds", f.Field)
	}
}
