package e2e

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/epwindow/epwindow/lint"
)

// ruleCase is one object that breaks only rule, and its fixed twin.
type ruleCase struct {
	name string
	rule string
	// bad and fix edit the compliant Deployment (deployment below).
	bad, fix func(*appsv1.Deployment)
}

func app(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }

func execPreStop(argv ...string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		app(d).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: argv}}}
	}
}

func command(argv ...string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) { app(d).Command = argv }
}

// ruleCases: for every rule the policy claims, an object breaking only it
// and its fixed twin, plus the forms where lint and the policy once
// disagreed (a shell with options before -c; sleep arguments that are no
// number; sleep with a unit).
func ruleCases(target lint.Target) []ruleCase {
	n := int(target.PreStopSeconds())
	secs := strconv.Itoa
	probe := func() *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}}
	}
	return []ruleCase{
		{"no readiness probe", lint.RuleReadinessProbe,
			func(d *appsv1.Deployment) { app(d).ReadinessProbe = nil }, func(*appsv1.Deployment) {}},
		{"no preStop", lint.RulePreStopMissing,
			func(d *appsv1.Deployment) { app(d).Lifecycle = nil },
			func(d *appsv1.Deployment) {
				app(d).Lifecycle = nil
				d.Spec.Template.Annotations = map[string]string{lint.AnnotationShutdownDelay: target.PreStop.String()}
			}},
		{"short preStop", lint.RulePreStopShort,
			func(d *appsv1.Deployment) { app(d).Lifecycle.PreStop.Sleep.Seconds = 1 }, func(*appsv1.Deployment) {}},
		{"httpGet preStop of unknown length", lint.RulePreStopUnknown,
			func(d *appsv1.Deployment) {
				app(d).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(8080)}}}
			}, execPreStop("sleep", secs(n))},
		{"sleep infinity", lint.RulePreStopUnknown, execPreStop("sleep", "infinity"), execPreStop("sleep", secs(n))},
		{"sleep nan", lint.RulePreStopUnknown, execPreStop("/bin/sleep", "nan"), execPreStop("/bin/sleep", secs(n)+"s")},
		{"sh -e -c sleep with a unit, short", lint.RulePreStopShort, execPreStop("sh", "-e", "-c", "sleep 1s; kill 1"),
			// A minute's preStop needs a grace period of 60 s + drain +
			// headroom: a policy that misread 1m as 1 s would say EPW003,
			// one that ignored the unit's size would not ask for the grace.
			func(d *appsv1.Deployment) {
				execPreStop("sh", "-e", "-c", "sleep 1m; kill 1")(d)
				d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(60 + target.TailSeconds())
			}},
		{"short grace period", lint.RuleGraceShort,
			func(d *appsv1.Deployment) {
				d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(target.GraceSeconds(0) - 2))
			},
			func(*appsv1.Deployment) {}},
		{"liveness shares readiness", lint.RuleProbesShared,
			func(d *appsv1.Deployment) { app(d).LivenessProbe = probe() },
			func(d *appsv1.Deployment) { p := probe(); p.FailureThreshold = 6; app(d).LivenessProbe = p }},
		{"sh -c without exec", lint.RuleShellPID1, command("sh", "-c", "epwindow probe"), command("sh", "-c", "exec epwindow probe")},
		{"sh -e -c without exec", lint.RuleShellPID1, command("sh", "-e", "-c", "epwindow probe"), command("sh", "-e", "-c", "exec epwindow probe")},
		{"bash -x -c without exec, with $0", lint.RuleShellPID1, command("bash", "-x", "-c", "epwindow probe", "name"), command("bash", "-x", "-c", "exec epwindow probe", "name")},
		{"exec sleep in a distroless image", lint.RuleDistrolessExec,
			func(d *appsv1.Deployment) {
				app(d).Image = "gcr.io/distroless/static:nonroot"
				execPreStop("sleep", secs(n))(d)
			},
			func(d *appsv1.Deployment) { app(d).Image = "gcr.io/distroless/static:nonroot" }},
	}
}

// TestPolicyRules applies the policy to the real API server and, for each
// rule it claims, dry-run creates an object that breaks only that rule
// (refused, with the rule's message and no other rule's) and its fixed
// twin (admitted); lint reports the same rule on the same object, and
// nothing on the twin. Then every form (forms_test.go) gets the same
// verdict from lint and from the API server. Dry runs pass admission and store nothing, so the
// cases cost a request each.
func TestPolicyRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	target := lint.Target{PreStop: 3 * time.Second, Drain: 2 * time.Second, Headroom: 5 * time.Second, From: "e2e"}
	grace := target.GraceSeconds(0)
	ns, _ := applyPolicy(ctx, t, cs, "lint-rules", target)

	deps := cs.AppsV1().Deployments(ns)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// The policy takes effect asynchronously (see TestPolicyAndLiveLint):
	// wait until the first bad case is refused.
	cases := ruleCases(target)
	first := deployment("probe-wait", target, grace)
	cases[0].bad(first)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := deps.Create(ctx, first, dryRun)
		return err != nil, nil
	}); err != nil {
		t.Fatal("the Deny policy refused nothing within a minute")
	}
	lintOpts := lint.Options{Target: target}
	claimed := map[string]bool{}
	for i, tc := range cases {
		claimed[tc.rule] = true
		t.Run(tc.name, func(t *testing.T) {
			bad := deployment("bad-"+strconv.Itoa(i), target, grace)
			tc.bad(bad)
			fixed := deployment("fixed-"+strconv.Itoa(i), target, grace)
			tc.fix(fixed)

			if got := lintRules(t, ns, bad, lintOpts); !slices.Equal(got, []string{tc.rule}) {
				t.Errorf("lint on the bad object: %v, want only %s", got, tc.rule)
			}
			if got := lintRules(t, ns, fixed, lintOpts); len(got) != 0 {
				t.Errorf("lint on the fixed twin: %v, want none", got)
			}
			_, err := deps.Create(ctx, bad, dryRun)
			if err == nil {
				t.Fatalf("the policy admits an object that breaks %s", tc.rule)
			}
			r, _ := lint.RuleByID(tc.rule)
			if msg := err.Error(); !strings.Contains(msg, r.ID+" "+r.Name) || !strings.Contains(msg, "Fix: "+r.Fix) {
				t.Errorf("refusal %q lacks %q and its fix", msg, r.ID+" "+r.Name)
			}
			for _, other := range lint.Rules {
				if other.ID != tc.rule && strings.Contains(err.Error(), other.ID) {
					t.Errorf("refusal also names %s: %v", other.ID, err)
				}
			}
			if _, err := deps.Create(ctx, fixed, dryRun); err != nil {
				t.Errorf("the policy refuses the fixed twin: %v", err)
			}
		})
	}
	for _, r := range lint.Rules {
		if r.Policy && !claimed[r.ID] {
			t.Errorf("the policy claims %s but no case breaks it", r.ID)
		}
	}

	// The forms: lint and the API server give each the same verdict on the
	// rules the policy claims, the one it was written for. A dry run each,
	// some 0.2 s with -race on the shared machine (51 forms took 10 s).
	for i, f := range forms(target) {
		t.Run("form/"+f.name, func(t *testing.T) {
			d := deployment("form-"+strconv.Itoa(i), target, grace)
			f.edit(d)
			want := verdict(nil)
			if f.want != "" {
				want = verdict([]string{f.want})
			}
			var onPolicy []string // lint's verdict on the rules the policy claims
			for _, id := range lintRules(t, ns, d, lintOpts) {
				if r, _ := lint.RuleByID(id); r.Policy {
					onPolicy = append(onPolicy, id)
				}
			}
			got := verdict(onPolicy)
			policy := verdict(nil)
			if _, err := deps.Create(ctx, d, dryRun); err != nil {
				policy = verdict(ruleIDRE.FindAllString(err.Error(), -1))
				if policy == verdict(nil) {
					t.Fatalf("the API server refuses it without a rule: %v", err)
				}
				t.Logf("refused: %v", err)
			}
			if got != want || policy != want {
				t.Errorf("lint: %s, policy: %s; want %s for both", got, policy, want)
			}
		})
	}
}

// lintRules runs lint on one Deployment, as lint --cluster reads it, and
// returns the rules found.
func lintRules(t *testing.T, ns string, d *appsv1.Deployment, o lint.Options) []string {
	t.Helper()
	d = d.DeepCopy()
	d.Namespace = ns
	obj, err := lint.LiveObject("apps/v1", "Deployment", d)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := lint.Check([]*lint.Object{obj}, o)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		if f.Waived == "" && !slices.Contains(out, f.Rule) {
			out = append(out, f.Rule)
		}
	}
	return out
}

// applyPolicy creates a namespace prefix-RUN labelled for this test alone and
// applies the Deny policy for target, bound to that namespace only: other
// tests on the same cluster are never affected. Everything goes at the
// test's end.
func applyPolicy(ctx context.Context, t *testing.T, cs kubernetes.Interface, prefix string, target lint.Target) (ns string, binding *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	run := suffix(t)
	ns = prefix + "-" + run
	label := "epwindow.io/" + prefix
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{label: run}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	policy, binding, err := lint.Policy(lint.PolicyOptions{
		Target: target, Name: "epwindow-" + prefix + "-" + run, Actions: []admissionv1.ValidationAction{admissionv1.Deny},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: run}},
	})
	if err != nil {
		t.Fatal(err)
	}
	vap := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	vapb := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if _, err := vap.Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server refuses the generated policy: %v", err)
	}
	t.Cleanup(func() { _ = vap.Delete(context.Background(), policy.Name, metav1.DeleteOptions{}) })
	if _, err := vapb.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server refuses the generated binding: %v", err)
	}
	t.Cleanup(func() { _ = vapb.Delete(context.Background(), binding.Name, metav1.DeleteOptions{}) })
	return ns, binding
}
