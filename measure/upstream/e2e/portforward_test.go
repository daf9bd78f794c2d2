package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure/upstream"
)

// fakeNginxEnv, when set, makes this binary the stand-in controller: it
// serves the file it names as GET /configuration/backends on
// 127.0.0.1:10246 — in the pod's network namespace, where only a
// port-forward reaches it, as with the real ingress-nginx status port.
const fakeNginxEnv = "EPWINDOW_FAKE_NGINX_BACKENDS_FILE"

// cluster is the package's local cluster, started once in TestMain.
var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	if file := os.Getenv(fakeNginxEnv); file != "" {
		os.Exit(serveFakeNginx(file))
	}
	localcluster.Main(m, "measure/upstream/e2e", localcluster.Options{}, func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// serveFakeNginx is the stand-in controller's main.
func serveFakeNginx(file string) int {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /configuration/backends", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	srv := &http.Server{Addr: "127.0.0.1:10246", Handler: mux}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		<-sig
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "fake ingress-nginx:", err)
		return 1
	}
	return 0
}

func nginxBackends(ns, svc string, port int32, addrs ...string) string {
	var eps []string
	for _, a := range addrs {
		ap := netip.MustParseAddrPort(a)
		eps = append(eps, fmt.Sprintf(`{"address":%q,"port":"%d"}`, ap.Addr(), ap.Port()))
	}
	return fmt.Sprintf(`[{"name":"%s-%s-%d","port":%d,"endpoints":[%s]}]`, ns, svc, port, port, strings.Join(eps, ","))
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	// write-then-rename: the stand-in never reads half a file
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// standIn copies this test binary where the node agent can run it.
func standIn(t *testing.T) (bin, dir string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err = os.MkdirTemp("", "epwindow-fake-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "fake-nginx-controller")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

func controllerPod(ns, name, bin, file string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/component": "controller",
		}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(2)),
			// Like the DaemonSet controllers often run as: tolerate every
			// taint, so a node the lifecycle controller briefly marks
			// not-ready under load does not hold the stand-in back.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:    "controller",
				Image:   "registry.k8s.io/ingress-nginx/controller", // not pulled: the node agent runs Command
				Command: []string{bin},
				// what ingress-nginx's args look like; the stand-in ignores them
				Args: []string{"--election-id=ingress-nginx-leader", "--sync-rate-limit=0.5"},
				Env:  []corev1.EnvVar{{Name: fakeNginxEnv, Value: file}},
			}},
		},
	}
}

func newNamespace(t *testing.T, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// waitRunning waits until every pod in ns is Running.
func waitRunning(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, n int) {
	t.Helper()
	for {
		pl, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, p := range pl.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running == n {
			return
		}
		select {
		case <-ctx.Done():
			var states []string
			for _, p := range pl.Items {
				st := fmt.Sprintf("%s: phase %s node %q", p.Name, p.Status.Phase, p.Spec.NodeName)
				for _, c := range p.Status.Conditions {
					st += fmt.Sprintf(" %s=%s(%s)", c.Type, c.Status, c.Message)
				}
				for _, c := range p.Status.ContainerStatuses {
					if w := c.State.Waiting; w != nil {
						st += fmt.Sprintf(" waiting %s: %s", w.Reason, w.Message)
					}
					if x := c.State.Terminated; x != nil {
						st += fmt.Sprintf(" terminated %d %s: %s", x.ExitCode, x.Reason, x.Message)
					}
				}
				states = append(states, st)
			}
			t.Fatalf("%d of %d stand-in controller pods running: %v\n%s", running, n, ctx.Err(), strings.Join(states, "\n"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestNginxThroughPortForward: two stand-in ingress-nginx pods, each serving
// its own backends list on in-pod 127.0.0.1:10246. The nginx observer finds
// them by the chart's labels, port-forwards to each through the API server,
// reads --sync-rate-limit from their args, sees steady state, and when one
// replica drops an address at a known instant, brackets that instant for
// that replica only.
func TestNginxThroughPortForward(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	bin, dir := standIn(t)
	ns := newNamespace(t, client, "upstream-e2e-")
	target := upstream.Target{Namespace: "epwindow", Service: "probe", Port: 80}
	a, b := "10.244.7.1:8080", "10.244.7.2:8080"
	files := map[string]string{}
	for _, name := range []string{"controller-0", "controller-1"} {
		files[name] = filepath.Join(dir, name+".json")
		writeFile(t, files[name], nginxBackends(target.Namespace, target.Service, target.Port, a, b))
		if _, err := client.CoreV1().Pods(ns).Create(ctx, controllerPod(ns, name, bin, files[name]), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRunning(ctx, t, client, ns, 2)

	const iv = 200 * time.Millisecond
	obs, _, err := upstream.New(ctx, upstream.KindNginx, upstream.Deps{Client: client, Config: cluster.Config}, target,
		upstream.Options{Interval: iv, ControllerNamespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	if got := obs.Settings(ctx); got["sync-rate-limit"] != "0.5" {
		t.Errorf("settings %v, want sync-rate-limit 0.5 from the pods' args", got)
	}
	tr := upstream.NewTracker(obs, nil, 0)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tr.Run(rctx) }()
	defer func() { stop(); <-done }()

	addrA, addrB := netip.MustParseAddrPort(a), netip.MustParseAddrPort(b)
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	var why string
	if err := tr.WaitFor(wctx, func() bool {
		var ok bool
		ok, why = tr.Steady([]netip.AddrPort{addrA, addrB})
		return ok
	}); err != nil {
		t.Fatalf("never steady through the port-forwards: %s", why)
	}
	snap, _ := tr.Latest()
	if len(snap.Replicas) != 2 {
		t.Fatalf("replicas %+v, want the two stand-in pods", snap.Replicas)
	}

	before := time.Now()
	writeFile(t, files["controller-0"], nginxBackends(target.Namespace, target.Service, target.Port, b))
	after := time.Now()
	if err := tr.WaitFor(wctx, func() bool {
		rs := tr.Removals(addrA)
		return len(rs) == 2 && (rs[0].Done() || rs[1].Done())
	}); err != nil {
		t.Fatalf("removal never seen: %v", err)
	}
	for _, r := range tr.Removals(addrA) {
		switch r.Replica {
		case ns + "/controller-0":
			from, to := r.Bracket()
			if !r.Done() || !from.Before(after) || to.Before(before) || r.Invalid() != "" {
				t.Errorf("controller-0: bracket [%v, %v] (invalid %q) should contain the change [%v, %v]", from, to, r.Invalid(), before, after)
			}
			t.Logf("controller-0: removed %v after the change (interval %v), bracket %v wide, removed poll's round trip through the port-forward %v",
				r.Removed.At.Sub(after), iv, to.Sub(from), r.Removed.At.Sub(r.Removed.Sent))
		case ns + "/controller-1":
			if r.Done() {
				t.Errorf("controller-1 never dropped the address, yet removed at %v", r.Removed.At)
			}
		default:
			t.Errorf("unexpected replica %s", r.Replica)
		}
	}
}

// TestNginxPermissionErrors: a user who may not list pods is told which
// permission is missing; one who may list but not port-forward gets the
// pod named with "create pods/portforward in namespace …".
func TestNginxPermissionErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	bin, dir := standIn(t)
	ns := newNamespace(t, admin, "upstream-rbac-")
	file := filepath.Join(dir, "backends.json")
	writeFile(t, file, "[]")
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, controllerPod(ns, "controller-0", bin, file), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(ctx, t, admin, ns, 1)

	// A user with no bindings at all, impersonated by the admin.
	const user = "epwindow-upstream-e2e"
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	poll := func() (upstream.Snapshot, error) {
		obs, _, err := upstream.New(ctx, upstream.KindNginx, upstream.Deps{Client: client, Config: cfg}, upstream.Target{Namespace: "x", Service: "y", Port: 80},
			upstream.Options{ControllerNamespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		defer obs.Close()
		return obs.Poll(ctx)
	}
	if _, err := poll(); err == nil || !strings.Contains(err.Error(), "needs RBAC: list pods in namespace "+ns) {
		t.Errorf("without list pods: %v", err)
	}

	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "list-pods"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	}}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "list-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "list-pods"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect once the authorizer's informer has the binding.
	var snap upstream.Snapshot
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		snap, lastErr = poll()
		return lastErr == nil, nil
	}); err != nil {
		t.Fatalf("list pods still refused 30 s after the RoleBinding: %v", lastErr)
	}
	if len(snap.Replicas) != 1 || snap.Replicas[0].Err == nil {
		t.Fatalf("port-forward without the permission: %+v", snap.Replicas)
	}
	msg := snap.Replicas[0].Err.Error()
	for _, w := range []string{"pod " + ns + "/controller-0", "create pods/portforward in namespace " + ns} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not mention %q", msg, w)
		}
	}
}
