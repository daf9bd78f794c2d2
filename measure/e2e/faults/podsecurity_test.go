package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/epwindow/epwindow/deploy"
)

// The namespace measure creates enforces Pod Security "restricted"
// (deploy/base/namespace.yaml), and the local API server really enforces
// it: in such a namespace the rendered probe Deployment's pods are admitted
// and become Ready, while a privileged pod and a pod running as root are
// rejected by the API server's PodSecurity admission.
func TestPodSecurityRestrictedEnforced(t *testing.T) {
	ctx := context.Background()
	ns := testNamespacePrefix + "pss-" + suffix(t)
	wl, err := deploy.Render(deploy.Params{
		Namespace: ns, Name: "probe", Replicas: 2, Image: deploy.DefaultImage,
		IngressClass: ingressClass, Hold: time.Second, PreStop: true, RunID: "pss",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := wl.Namespace.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("measure's namespace has pod-security.kubernetes.io/enforce=%q, want restricted", got)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, wl.Namespace, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	t.Cleanup(func() { deleteNamespace(t, ns) })

	// The probe pods are admitted and run.
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, wl.Deployment, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the probe deployment: %v", err)
	}
	ready := waitReady(t, ns, labels.SelectorFromSet(wl.Deployment.Spec.Selector.MatchLabels).String(), 2)
	t.Logf("probe pods admitted and Ready under enforce=restricted: %s, %s", ready[0].Name, ready[1].Name)

	// The same pod, weakened two ways, is refused at admission: nothing is
	// created (a real create, not a dry run, so a missing admission plugin
	// would show as a created pod).
	tmpl := wl.Deployment.Spec.Template
	probePod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: *tmpl.Spec.DeepCopy()}
	}
	privileged := probePod("privileged")
	yes := true
	privileged.Spec.Containers[0].SecurityContext.Privileged = &yes
	privileged.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes

	root := probePod("root")
	zero, no := int64(0), false
	root.Spec.SecurityContext.RunAsUser, root.Spec.SecurityContext.RunAsNonRoot = &zero, &no
	root.Spec.Containers[0].SecurityContext.RunAsUser, root.Spec.Containers[0].SecurityContext.RunAsNonRoot = &zero, &no

	for _, pod := range []*corev1.Pod{privileged, root} {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
			t.Errorf("pod %q: create error = %v, want Forbidden by PodSecurity", pod.Name, err)
			continue
		}
		t.Logf("pod %q rejected: %v", pod.Name, err)
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod %q exists after its rejection (get: %v)", pod.Name, err)
		}
	}
}
