package deploy

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// restricted checks a pod with the Pod Security admission's own checks
// (k8s.io/pod-security-admission/policy, the code the API server's
// PodSecurity plugin runs) at level restricted, latest version.
func restricted(t *testing.T, meta *metav1.ObjectMeta, spec *corev1.PodSpec) policy.AggregateCheckResult {
	t.Helper()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	level := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	return policy.AggregateCheckResults(eval.EvaluatePod(level, meta, spec))
}

// TestPodSecurityRestricted runs the rendered pod through the Pod Security
// admission's own checks (k8s.io/pod-security-admission/policy, the code the
// API server's PodSecurity plugin runs) at level restricted, latest version,
// for every overlay and the options that change the pod.
func TestPodSecurityRestricted(t *testing.T) {
	variants := map[string]func(*Params){
		"default":       func(*Params) {},
		"no preStop":    func(p *Params) { p.PreStop = false },
		"preStop sleep": func(p *Params) { p.PreStopSleep = 5 * time.Second },
		"exit on term":  func(p *Params) { p.ExitOnSigterm = true },
	}
	for _, o := range append(Overlays(), BaseOverlay) {
		for name, mod := range variants {
			t.Run(o+"/"+name, func(t *testing.T) {
				p := testParams()
				p.Overlay = o
				mod(&p)
				wl := mustRender(t, p)
				tmpl := wl.Deployment.Spec.Template
				res := restricted(t, &tmpl.ObjectMeta, &tmpl.Spec)
				if !res.Allowed {
					t.Errorf("pod violates PodSecurity restricted: %s: %s", res.ForbiddenReason(), res.ForbiddenDetail())
				}
				// Not part of the restricted profile, but promised too.
				sc := container(wl.Deployment).SecurityContext
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Error("readOnlyRootFilesystem is not true")
				}
				if sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
					t.Errorf("runAsUser = %v, want 65532", sc.RunAsUser)
				}
			})
		}
	}
}

// The in-cluster load runners pass restricted too, for every overlay: they
// are built from the probe's pod template, and a new namespace enforces
// restricted (base/namespace.yaml).
func TestPodSecurityRestrictedRunners(t *testing.T) {
	for _, o := range append(Overlays(), BaseOverlay) {
		t.Run(o, func(t *testing.T) {
			p := testParams()
			p.Overlay = o
			d, err := RunnerDeployment(mustRender(t, p), p, testRunners())
			if err != nil {
				t.Fatal(err)
			}
			tmpl := d.Spec.Template
			res := restricted(t, &tmpl.ObjectMeta, &tmpl.Spec)
			if !res.Allowed {
				t.Errorf("runner pod violates PodSecurity restricted: %s: %s", res.ForbiddenReason(), res.ForbiddenDetail())
			}
			sc := tmpl.Spec.Containers[0].SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Error("runner readOnlyRootFilesystem is not true")
			}
		})
	}
}

// TestPodSecurityCheckerBites: the same checker rejects the pod once one
// hardening field is removed, so the test above is not vacuous.
func TestPodSecurityCheckerBites(t *testing.T) {
	wl := mustRender(t, testParams())
	tmpl := wl.Deployment.Spec.Template
	container(wl.Deployment).SecurityContext.Capabilities = nil
	res := restricted(t, &tmpl.ObjectMeta, &tmpl.Spec)
	if res.Allowed {
		t.Error("pod without capabilities.drop=ALL passes restricted: the checker is not running")
	}
}

// TestPodSecurityRestrictedSchedule: the scheduled run's pod passes the
// restricted profile its namespace enforces, with the history volume
// mounted writable.
func TestPodSecurityRestrictedSchedule(t *testing.T) {
	s := mustBuild(t, RenderSchedule, testScheduleParams())
	tmpl := s.CronJob.Spec.JobTemplate.Spec.Template
	res := restricted(t, &tmpl.ObjectMeta, &tmpl.Spec)
	if !res.Allowed {
		t.Errorf("the scheduled run's pod violates PodSecurity restricted: %s: %s", res.ForbiddenReason(), res.ForbiddenDetail())
	}
	if !slices.ContainsFunc(tmpl.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == HistoryMountPath && !m.ReadOnly }) {
		t.Errorf("the history volume is not mounted writable at %s", HistoryMountPath)
	}
}
