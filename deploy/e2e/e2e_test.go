package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/localcluster"
)

var (
	cluster    *localcluster.Cluster
	admin      kubernetes.Interface
	restricted kubernetes.Interface
)

func TestMain(m *testing.M) {
	localcluster.Main(m, "deploy/e2e", localcluster.Options{}, func(c *localcluster.Cluster) error {
		cluster = c
		var err error
		if admin, err = kubernetes.NewForConfig(c.Config); err != nil {
			return err
		}
		rc, err := clientcmd.BuildConfigFromFlags("", c.RestrictedKubeconfig)
		if err == nil {
			restricted, err = kubernetes.NewForConfig(rc)
		}
		if err != nil {
			return fmt.Errorf("restricted kubeconfig: %w", err)
		}
		return nil
	})
}

func suffix(t *testing.T) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func render(t *testing.T, ns string) *deploy.Workload {
	t.Helper()
	wl, err := deploy.Render(deploy.Params{
		Namespace: ns, Name: "probe", Replicas: 2, Image: deploy.DefaultImage,
		IngressClass: "skipper", Hold: 30 * time.Second, PreStop: true, RunID: "e2e",
	})
	if err != nil {
		t.Fatal(err)
	}
	return wl
}

// TestPodSecurityAdmission creates the rendered namespace (it enforces
// "restricted") and submits the probe pod with a server-side dry run: the
// API server's PodSecurity admission plugin accepts it, and rejects the same
// pod once its container may escalate privileges. Nothing is persisted but
// the namespace, which the test deletes.
func TestPodSecurityAdmission(t *testing.T) {
	ctx := context.Background()
	ns := "epwindow-pss-" + suffix(t)
	wl := render(t, ns)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, wl.Namespace, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	tmpl := wl.Deployment.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pss-check", Namespace: ns, Labels: tmpl.Labels},
		Spec:       *tmpl.Spec.DeepCopy(),
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, dry); err != nil {
		t.Fatalf("the rendered probe pod is rejected in a namespace enforcing restricted: %v", err)
	}

	weak := pod.DeepCopy()
	allow := true
	weak.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &allow
	_, err := admin.CoreV1().Pods(ns).Create(ctx, weak, dry)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Fatalf("a pod allowing privilege escalation: err = %v, want Forbidden by PodSecurity (is the admission plugin on?)", err)
	}
}

// decode returns the objects of a multi-document YAML stream.
func decode(t *testing.T, data []byte) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		out = append(out, obj)
	}
	return out
}

// apply creates the RBAC objects of deploy/rbac/<variant>, bound to user
// "restricted"; they are deleted when t ends. ns, when set, replaces the
// namespace the variant's Namespace, Roles and RoleBindings name (so that
// a test need not wait for another's namespace to finish terminating).
func apply(t *testing.T, variant, ns string) {
	t.Helper()
	ctx := context.Background()
	data, err := deploy.Kustomize("rbac/" + variant)
	if err != nil {
		t.Fatal(err)
	}
	var undo []func()
	t.Cleanup(func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	})
	subject := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "restricted"}}
	del := metav1.DeleteOptions{}
	for _, obj := range decode(t, data) {
		switch o := obj.(type) {
		case *corev1.Namespace:
			if ns != "" {
				o.Name = ns
			}
			if _, err = admin.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{}); err == nil {
				undo = append(undo, func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), o.Name, del) })
			}
		case *rbacv1.ClusterRole:
			if _, err = admin.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{}); err == nil {
				undo = append(undo, func() { _ = admin.RbacV1().ClusterRoles().Delete(context.Background(), o.Name, del) })
			}
		case *rbacv1.ClusterRoleBinding:
			o.Subjects = subject
			if _, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{}); err == nil {
				undo = append(undo, func() { _ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), o.Name, del) })
			}
		case *rbacv1.Role:
			if ns != "" {
				o.Namespace = ns
			}
			if _, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err == nil {
				undo = append(undo, func() { _ = admin.RbacV1().Roles(o.Namespace).Delete(context.Background(), o.Name, del) })
			}
		case *rbacv1.RoleBinding:
			o.Subjects = subject
			if ns != "" {
				o.Namespace = ns
			}
			if _, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err == nil {
				undo = append(undo, func() { _ = admin.RbacV1().RoleBindings(o.Namespace).Delete(context.Background(), o.Name, del) })
			}
		default:
			t.Fatalf("deploy/rbac/%s: unexpected %T", variant, obj)
		}
		if err != nil {
			t.Fatalf("apply deploy/rbac/%s: %v", variant, err)
		}
	}
}

// eventually polls check until it returns no missing permission: the RBAC
// authorizer reads roles through informers, so a new binding takes effect
// after a watch event, not at once.
func eventually(t *testing.T, check func() ([]deploy.Perm, error)) []deploy.Perm {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing, err := check()
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRBACIsEnough asks the real RBAC authorizer, as a user with no bindings
// and then with deploy/rbac/ applied, for every permission measure checks.
func TestRBACIsEnough(t *testing.T) {
	ctx := context.Background()
	authz := restricted.AuthorizationV1()
	ns := "epwindow-" + suffix(t)

	// Without bindings: all missing but the review itself, which
	// system:basic-user grants to every authenticated user.
	missing, err := deploy.MissingPermissions(ctx, authz, ns)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(deploy.RequiredPermissions(true)) - 1; len(missing) != want {
		t.Errorf("without bindings %d missing, want %d: %v", len(missing), want, missing)
	}
	for _, p := range missing {
		if p.Resource == "selfsubjectaccessreviews" {
			t.Errorf("%s reported missing; every authenticated user has it", p)
		}
	}

	// Namespaced first: the cluster variant's binding would also grant what
	// the namespaced one must not, for as long as the authorizer's cache
	// still holds it.
	t.Run("namespaced", func(t *testing.T) {
		apply(t, "namespaced", "")
		check := func() ([]deploy.Perm, error) {
			return deploy.Check(ctx, authz, "epwindow", deploy.RequiredPermissions(false))
		}
		if m := eventually(t, check); len(m) != 0 {
			t.Errorf("with deploy/rbac/namespaced still missing in namespace epwindow: %v", m)
		}
		// The Role grants nothing in another namespace.
		other, err := deploy.Check(ctx, authz, ns, deploy.RequiredPermissions(false))
		if err != nil {
			t.Fatal(err)
		}
		if len(other) == 0 {
			t.Error("the namespaced variant grants permissions outside namespace epwindow")
		}
	})
	t.Run("cluster", func(t *testing.T) {
		apply(t, "cluster", "")
		if m := eventually(t, func() ([]deploy.Perm, error) { return deploy.MissingPermissions(ctx, authz, ns) }); len(m) != 0 {
			t.Errorf("with deploy/rbac/cluster still missing: %v", m)
		}
	})
	t.Run("observer", func(t *testing.T) {
		// The kustomization puts the Role in ingress-nginx; create it so the
		// Role has somewhere to live.
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ingress-nginx"}}
		if _, err := admin.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CoreV1().Namespaces().Delete(context.Background(), "ingress-nginx", metav1.DeleteOptions{})
		})
		apply(t, "observer", "")
		check := func() ([]deploy.Perm, error) {
			return deploy.Check(ctx, authz, ns, deploy.ObserverPermissions("ingress-nginx"))
		}
		if m := eventually(t, check); len(m) != 0 {
			t.Errorf("with deploy/rbac/observer still missing: %v", m)
		}
	})
}
