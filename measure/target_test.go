package measure

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
	"github.com/epwindow/epwindow/sidecar"
)

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]string{"deployment/app": "app", "deploy/app": "app", "deployments/app": "app", "Deployment/app": "app"} {
		if got, err := ParseTarget(in); err != nil || got != want {
			t.Errorf("ParseTarget(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"app", "deployment/", "statefulset/db", "pod/x"} {
		if _, err := ParseTarget(in); err == nil || !strings.Contains(err.Error(), "--"+FlagTarget) {
			t.Errorf("ParseTarget(%q): error %v, want one naming --%s", in, err, FlagTarget)
		}
	}
}

// A target run validates its own way: no --url with --rate 0 (the app's
// own traffic), the namespace required, the probe workload's flags refused.
func TestValidateTarget(t *testing.T) {
	base := func() Config {
		c := validConfig()
		c.Target = TargetOptions{Deployment: "app"}
		c.Namespace, c.Mode = "team", ModeEvict
		return c
	}
	ok := base()
	ok.URL, ok.Rate = nil, 0
	if err := ok.Validate(); err != nil {
		t.Errorf("--target with --rate 0 and no --url: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no namespace", func(c *Config) { c.Namespace = "" }, "--" + FlagNamespace},
		{"load without url", func(c *Config) { c.URL = nil }, "--" + FlagURL},
		{"dns", func(c *Config) { c.DNS = true }, "--" + FlagDNS},
		{"exit on sigterm", func(c *Config) { c.ExitOnSigterm = true }, "--" + FlagExitOnTerm},
		{"rollout", func(c *Config) { c.Mode = ModeRollout }, "--" + FlagMode},
		{"port", func(c *Config) { c.Target.Ports = []int32{70000} }, "--" + FlagPort},
	} {
		c := base()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
}

func TestRolledOut(t *testing.T) {
	three := int32(3)
	d := func(gen, observed int64, replicas, updated, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: &three},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available}}
	}
	for _, tc := range []struct {
		d    *appsv1.Deployment
		done bool
	}{
		{d(2, 1, 3, 3, 3), false}, // the controller has not seen the patch
		{d(2, 2, 4, 1, 3), false}, // one updated, old ones still there
		{d(2, 2, 4, 3, 3), false}, // an old one pending termination
		{d(2, 2, 3, 3, 2), false}, // one updated replica not yet available
		{d(2, 2, 3, 3, 3), true},
	} {
		if done, why := rolledOut(tc.d); done != tc.done {
			t.Errorf("rolledOut(%+v) = %v (%s), want %v", tc.d.Status, done, why, tc.done)
		}
	}
}

func TestRoutingIngress(t *testing.T) {
	svc := func(n string) *corev1.Service { return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: n}} }
	ing := func(name, host, service string) networkingv1.Ingress {
		return networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: service}}}}}}}}}}
	}
	ings := []networkingv1.Ingress{ing("z-other", "x.example", "other"), ing("b", "b.example", "app"), ing("a", "a.example", "app-admin")}
	svcs := []*corev1.Service{svc("app"), svc("app-admin")}
	if got, s := routingIngress(ings, svcs, ""); got == nil || got.Name != "a" || s.Name != "app-admin" {
		t.Errorf("any host: %v %v, want Ingress a to app-admin (first by name)", got, s)
	}
	if got, s := routingIngress(ings, svcs, "b.example"); got == nil || got.Name != "b" || s.Name != "app" {
		t.Errorf("host b.example: %v %v, want Ingress b to app", got, s)
	}
	if got, _ := routingIngress(ings[:1], svcs, ""); got != nil {
		t.Errorf("no Ingress routes to the Services, got %s", got.Name)
	}
}

// findTarget refuses, before anything is changed, a Deployment that does
// not exist, one another run has its sidecar in, and one no Service
// selects; a Deployment that keeps the sidecar itself is measured as it is.
func TestFindTarget(t *testing.T) {
	two := int32(2)
	dep := func(name string, annotations map[string]string, sidecar bool) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"},
			Spec: appsv1.DeploymentSpec{Replicas: &two, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}, Annotations: annotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}}}
		if sidecar {
			d.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: deploy.SidecarContainerName}}
		}
		return d
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "app"},
		Ports: []corev1.ServicePort{{Port: 80}}}}
	objs := []runtime.Object{dep("app", nil, false), svc, dep("lonely", nil, false),
		dep("busy", map[string]string{deploy.SidecarRunAnnotation: "abc123"}, true), dep("kept", nil, true),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "team"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "kept"}}},
	}
	c := fake.NewClientset(objs...)
	ctx := context.Background()
	if tg, err := findTarget(ctx, c, "team", TargetOptions{Deployment: "app"}, ""); err != nil || tg.service.Name != "app" || tg.keptSidecar {
		t.Errorf("app: %+v, %v; want its Service and no kept sidecar", tg, err)
	}
	if tg, err := findTarget(ctx, c, "team", TargetOptions{Deployment: "kept"}, ""); err != nil || !tg.keptSidecar {
		t.Errorf("kept: %+v, %v; want the Deployment's own sidecar used", tg, err)
	}
	for name, want := range map[string]string{
		"missing": "--" + FlagTarget,
		"busy":    "abc123",
		"lonely":  "no Service",
	} {
		_, err := findTarget(ctx, c, "team", TargetOptions{Deployment: name}, "")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one with %q", name, err, want)
		}
	}
}

// A refused eviction (429, a PodDisruptionBudget) is retried, never
// forced, and T0 is the accepted one's; one refused for --eviction-wait
// ends the trial with an error naming the budget.
func TestEvictWaitsForTheBudget(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: "team", UID: "u1"}}
	for _, tc := range []struct {
		name    string
		refuse  int
		wait    time.Duration
		wantErr bool
	}{
		{"accepted after two refusals", 2, time.Minute, false},
		{"refused for the whole wait", 1000, 30 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(pod)
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			calls := 0
			c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				calls++
				if calls <= tc.refuse {
					return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 1)
				}
				return true, nil, nil
			})
			r := &runner{cfg: Config{Clock: clk, Target: TargetOptions{Deployment: "app", EvictionWait: tc.wait}}, ns: "team", deleter: c,
				progress: func(Progress) {}}
			done := make(chan error, 1)
			var t0 time.Time
			go func() {
				var err error
				t0, _, err = r.evict(context.Background(), 1, pod)
				done <- err
			}()
			for {
				select {
				case err := <-done:
					if (err != nil) != tc.wantErr {
						t.Fatalf("evict: %v, want error %v", err, tc.wantErr)
					}
					if tc.wantErr {
						if !errors.Is(err, errEvictionRefused) || !strings.Contains(err.Error(), "PodDisruptionBudget") {
							t.Errorf("error %v: want one naming the PodDisruptionBudget", err)
						}
						return
					}
					if calls != tc.refuse+1 || !t0.Equal(clk.Now()) {
						t.Errorf("%d evictions, T0 %s; want %d, and T0 at the accepted one (%s)", calls, t0, tc.refuse+1, clk.Now())
					}
					return
				case <-time.After(time.Millisecond):
					if clk.HasWaiters() {
						clk.Step(time.Second)
					}
				}
			}
		})
	}
}

// The sidecar's record makes the trial's pod-clock stages: the kubelet's
// connections (the node's address) stay out of the window, and an app that
// stopped listening while the ingress still listed its address censors the
// trial (the window is a floor), as do failures after it.
func TestSidecarRecord(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	unseen := int64(2)
	tl := &sidecar.Timeline{
		Peers: []sidecar.Peer{
			{Addr: "10.244.0.1", Accepts: 40, LastAccept: at(900 * time.Millisecond), LastRequest: at(950 * time.Millisecond)},
			{Addr: "192.168.1.5", Accepts: 9, LastAccept: at(3 * time.Second), LastRequest: at(3 * time.Second)}, // the kubelet
		},
		LastAccept: at(3 * time.Second), LastRequest: at(3 * time.Second),
		ListenerClosed: at(20 * time.Millisecond), Accepts: 49, UnseenConnections: &unseen,
		Poll: sidecar.Poll{IntervalNS: int64(10 * time.Millisecond), MaxGapNS: int64(14 * time.Millisecond)},
	}
	in := trialInput{trial: 1, pod: "app-1", addr: netip.MustParseAddr("10.244.0.7"), t0: t0, acked: t0.Add(time.Millisecond),
		sidecarMode: true, sidecar: tl, hostIP: "192.168.1.5", skewOK: true, skew: load.Estimate{Uncertainty: time.Millisecond},
		observer: "none", timelineSource: "termination message"}
	in.watch.terminatingSeen, in.watch.sliceNotReady = t0.Add(5*time.Millisecond), t0.Add(30*time.Millisecond)
	in.watch.sliceRemoved, in.watch.podDeleted = t0.Add(40*time.Millisecond), t0.Add(100*time.Millisecond)
	rec := buildRecord(in)
	w, ok := rec.Window()
	if !ok || w != 950*time.Millisecond {
		t.Errorf("window %v %v: want 950ms, the latest traffic, not the kubelet's 3s", w, ok)
	}
	if s, ok := rec.Stage(results.StageLastAccept); !ok || s.UncertaintyNS != int64(15*time.Millisecond) {
		t.Errorf("last_accept %+v: want the skew bound plus the longest gap between dumps (15ms)", s)
	}
	if !rec.Censored() {
		t.Errorf("listener closed at 20ms, slice not ready at 30ms: want the trial censored; reasons %v", rec.Reasons)
	}
	if rec.Sidecar == nil || rec.Sidecar.KubeletAccepts != 9 || *rec.Sidecar.UnseenConnections != 2 {
		t.Errorf("sidecar account %+v: want 9 kubelet accepts and 2 unseen connections", rec.Sidecar)
	}

	// The listener closing after the address left the slices (a preStop
	// that covered the window) censors nothing; a failure after it would.
	tl.ListenerClosed = at(5 * time.Second)
	if rec := buildRecord(in); rec.Censored() || !rec.Valid {
		t.Errorf("listener closed after the removal: censored %v, reasons %v; want a valid trial", rec.Censored(), rec.Reasons)
	}
	in.failures = map[string]int{"refused": 3}
	if rec := buildRecord(in); !rec.Censored() {
		t.Errorf("3 failures with the listener closed: want the trial censored")
	}

	// A connection no dump saw, counted by the poll at 1.2 s: the window
	// reaches that poll.
	tl.LastUnseen = at(1200 * time.Millisecond)
	if w, _ := buildRecord(in).Window(); w != 1200*time.Millisecond {
		t.Errorf("window %v with an unseen connection counted at 1.2s: want 1.2s", w)
	}

	// No record at all: the window is unknown, and the trial says why.
	in.sidecar, in.timelineSource = nil, "pod proxy: connection refused"
	if rec := buildRecord(in); rec.Valid || !strings.Contains(rec.InvalidReason(), "sidecar") {
		t.Errorf("no sidecar record: reasons %q, want an invalid trial naming the sidecar", rec.InvalidReason())
	}
}

// addSidecar's patch carries the resourceVersion it read: a conflict (the
// controller's status update, most often) is read again and patched again,
// unless another run's sidecar is in the template now.
func TestAddSidecarRetriesAConflict(t *testing.T) {
	two := int32(2)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team", ResourceVersion: "1"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}},
		Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}}
	for _, tc := range []struct {
		name      string
		conflicts int
		other     bool // another run's sidecar appears meanwhile
		want      string
	}{
		{"status changed once", 1, false, ""},
		{"another run got there first", 1, true, "run other1"},
		{"never still", 100, false, "kept changing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(dep.DeepCopy())
			patches := 0
			c.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
				patches++
				if patches <= tc.conflicts {
					if tc.other {
						d, _ := c.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("deployments"), "team", "app")
						o := d.(*appsv1.Deployment).DeepCopy()
						o.Spec.Template.Annotations = map[string]string{deploy.SidecarRunAnnotation: "other1"}
						o.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: deploy.SidecarContainerName}}
						_ = c.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), o, "team")
					}
					return true, nil, apierrors.NewConflict(appsv1.Resource("deployments"), "app", errors.New("the object has been modified"))
				}
				return false, nil, nil
			})
			r := &runner{cfg: Config{Client: c, Image: "epwindow:test", Target: TargetOptions{Deployment: "app", RolloutTimeout: time.Second}},
				ns: "team", runID: "abc", progress: func(Progress) {}}
			err := r.addSidecar(context.Background(), &target{deployment: dep.DeepCopy()})
			if tc.want == "" {
				if err != nil || !r.patched {
					t.Fatalf("addSidecar: %v (patched %v), want the sidecar added on the second try", err, r.patched)
				}
				d, _ := c.AppsV1().Deployments("team").Get(context.Background(), "app", metav1.GetOptions{})
				if sc, run := deploy.TemplateSidecar(d.Spec.Template); sc == nil || run != "abc" {
					t.Errorf("template after the patch: sidecar %v, run %q; want this run's", sc != nil, run)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || r.patched {
				t.Errorf("addSidecar: %v (patched %v), want an error with %q and nothing patched", err, r.patched, tc.want)
			}
		})
	}
}

// With --route httproute, --target finds the HTTPRoute that sends to the
// Deployment's Service and takes its parent Gateway (namespace defaulting
// to the route's); --gateway, when given, picks among several parents.
func TestFindTargetHTTPRoute(t *testing.T) {
	two := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "app"}}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "app"}}}
	c := fake.NewClientset(d, svc)
	route := func(name string, parents []any, backend string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
			"metadata": map[string]any{"name": name, "namespace": "team"},
			"spec": map[string]any{"parentRefs": parents,
				"rules": []any{map[string]any{"backendRefs": []any{map[string]any{"name": backend, "port": int64(80)}}}}},
		}}
	}
	dyn := gatewayAPI(t,
		route("a-other", []any{map[string]any{"name": "gw", "namespace": "infra"}}, "other"),
		route("b-app", []any{map[string]any{"name": "internal"}, map[string]any{"name": "gw", "namespace": "infra", "sectionName": "web"}}, "app"))
	ctx := context.Background()
	tg, err := findTargetRoute(ctx, c, dyn, "team", TargetOptions{Deployment: "app"}, "", RouteHTTPRoute, GatewayRef{})
	if err != nil || tg.httpRoute.GetName() != "b-app" || tg.gateway != (GatewayRef{Namespace: "team", Name: "internal"}) {
		t.Fatalf("any Gateway: %+v, %v; want b-app on its first parent, team/internal", tg, err)
	}
	tg, err = findTargetRoute(ctx, c, dyn, "team", TargetOptions{Deployment: "app"}, "", RouteHTTPRoute, GatewayRef{Namespace: "infra", Name: "gw"})
	if err != nil || tg.gateway != (GatewayRef{Namespace: "infra", Name: "gw", Section: "web"}) {
		t.Errorf("--gateway infra/gw: %+v, %v; want that parent with its section", tg, err)
	}
	if _, err := findTargetRoute(ctx, c, dyn, "team", TargetOptions{Deployment: "app"}, "", RouteHTTPRoute, GatewayRef{Namespace: "infra", Name: "nope"}); err == nil ||
		!strings.Contains(err.Error(), "no HTTPRoute") {
		t.Errorf("a Gateway no route of the Service attaches to: %v, want an error saying so", err)
	}
}

// A Deployment no Ingress routes to, with --observer auto, is refused
// before anything is patched: nothing picks the controller, nothing says
// the load reaches it. Named with --observer, it is measured.
func TestTargetWithoutARoute(t *testing.T) {
	two := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "app"}}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "app"},
		Ports: []corev1.ServicePort{{Port: 80}}}}
	c := fake.NewClientset(d, svc)
	r := &runner{cfg: Config{Client: c, Namespace: "team", Observer: upstream.KindAuto, Route: RouteIngress,
		Target: TargetOptions{Deployment: "app"}, Clock: clocktesting.NewFakeClock(time.Now())}, progress: func(Progress) {}}
	err := runTarget(context.Background(), r, nil, "v1.37.2")
	var fe *FlagError
	if !errors.As(err, &fe) || fe.Flag != FlagObserver || !strings.Contains(err.Error(), "no Ingress") {
		t.Fatalf("runTarget: %v, want a --observer error saying no Ingress routes to it", err)
	}
	if got, _ := c.AppsV1().Deployments("team").Get(context.Background(), "app", metav1.GetOptions{}); got.Spec.Template.Annotations != nil {
		t.Errorf("the refused run patched the Deployment: %v", got.Spec.Template.Annotations)
	}
}
