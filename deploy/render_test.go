package deploy

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func testParams() Params {
	return Params{
		Namespace:    "epwindow-x7k2q",
		Name:         "probe",
		Replicas:     3,
		Image:        "registry.example.com/epwindow:v1",
		IngressClass: "skipper",
		Host:         "probe.epwindow.test",
		Hold:         60 * time.Second,
		PreStop:      true,
		RunID:        "run-1",
		Labels:       map[string]string{"team": "platform"},
	}
}

func mustRender(t *testing.T, p Params) *Workload {
	t.Helper()
	return mustBuild(t, Render, p)
}

// mustBuild returns render(p), failing the test on an error.
func mustBuild[P, T any](t *testing.T, render func(P) (T, error), p P) T {
	t.Helper()
	out, err := render(p)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return out
}

func TestRenderSetsRunValues(t *testing.T) {
	p := testParams()
	wl := mustRender(t, p)

	if got := wl.Namespace.Name; got != p.Namespace {
		t.Errorf("namespace name = %q, want %q", got, p.Namespace)
	}
	for k, want := range map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		LabelManagedBy:                       ManagedByValue,
		LabelRunID:                           "run-1",
		"team":                               "platform",
	} {
		if got := wl.Namespace.Labels[k]; got != want {
			t.Errorf("namespace label %s = %q, want %q", k, got, want)
		}
	}
	wantLabels := map[string]string{
		LabelName: NameValue, LabelInstance: "probe", LabelManagedBy: ManagedByValue,
		LabelRunID: "run-1", "team": "platform",
	}
	wantSelector := map[string]string{LabelName: NameValue, LabelInstance: "probe", LabelRunID: "run-1"}
	d, s, ing := wl.Deployment, wl.Service, wl.Ingress
	for _, m := range []struct {
		kind, name, ns string
		labels         map[string]string
	}{
		{"Deployment", d.Name, d.Namespace, d.Labels},
		{"Service", s.Name, s.Namespace, s.Labels},
		{"Ingress", ing.Name, ing.Namespace, ing.Labels},
		{"pod template", "probe", p.Namespace, d.Spec.Template.Labels},
	} {
		if m.name != "probe" || m.ns != p.Namespace {
			t.Errorf("%s is %s/%s, want %s/probe", m.kind, m.ns, m.name, p.Namespace)
		}
		if !reflect.DeepEqual(m.labels, wantLabels) {
			t.Errorf("%s labels = %v, want %v", m.kind, m.labels, wantLabels)
		}
	}
	if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, wantSelector) {
		t.Errorf("deployment selector = %v, want %v", d.Spec.Selector.MatchLabels, wantSelector)
	}
	if !reflect.DeepEqual(s.Spec.Selector, wantSelector) {
		t.Errorf("service selector = %v, want %v", s.Spec.Selector, wantSelector)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 70 {
		t.Errorf("terminationGracePeriodSeconds = %v, want 70 (hold 60s + margin 10s)", g)
	}

	c := container(d)
	if c == nil {
		t.Fatal("no probe container")
	}
	if c.Image != p.Image {
		t.Errorf("image = %q, want %q", c.Image, p.Image)
	}
	wantCmd := []string{"epwindow", "probe", "--listen=:8080", "--hold=1m0s"}
	if !reflect.DeepEqual(c.Command, wantCmd) {
		t.Errorf("command = %q, want %q", c.Command, wantCmd)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "POD_NAME" || c.Env[0].ValueFrom == nil ||
		c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env = %+v, want POD_NAME from metadata.name", c.Env)
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/healthz" || rp.HTTPGet.Port != intstr.FromInt32(8080) ||
		rp.PeriodSeconds != 1 || rp.FailureThreshold != 1 {
		t.Errorf("readiness probe = %+v, want httpGet /healthz :8080 every 1s, failureThreshold 1", rp)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.HTTPGet == nil ||
		c.Lifecycle.PreStop.HTTPGet.Path != "/prestop" || c.Lifecycle.PreStop.HTTPGet.Port != intstr.FromInt32(8080) {
		t.Errorf("preStop = %+v, want httpGet /prestop :8080", c.Lifecycle)
	}
	if c.TerminationMessagePath != "/dev/termination-log" {
		t.Errorf("terminationMessagePath = %q", c.TerminationMessagePath)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports = %+v, want 8080", c.Ports)
	}

	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 8080 || s.Spec.Ports[0].TargetPort != intstr.FromInt32(8080) {
		t.Errorf("service ports = %+v, want 8080 -> 8080", s.Spec.Ports)
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "skipper" {
		t.Errorf("ingressClassName = %v, want skipper", ing.Spec.IngressClassName)
	}
	if len(ing.Spec.Rules) != 1 {
		t.Fatalf("ingress rules = %+v, want 1", ing.Spec.Rules)
	}
	r := ing.Spec.Rules[0]
	if r.Host != p.Host || r.HTTP == nil || len(r.HTTP.Paths) != 1 {
		t.Fatalf("ingress rule = %+v", r)
	}
	if b := r.HTTP.Paths[0].Backend.Service; b == nil || b.Name != "probe" || b.Port.Number != 8080 {
		t.Errorf("ingress backend = %+v, want probe:8080", b)
	}
}

func TestRenderOptions(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*Params)
		check func(t *testing.T, wl *Workload)
	}{
		{"no preStop", func(p *Params) { p.PreStop = false }, func(t *testing.T, wl *Workload) {
			if c := container(wl.Deployment); c.Lifecycle != nil {
				t.Errorf("lifecycle = %+v, want none", c.Lifecycle)
			}
		}},
		{"preStop sleep", func(p *Params) { p.PreStopSleep = 7500 * time.Millisecond }, func(t *testing.T, wl *Workload) {
			c := container(wl.Deployment)
			if got := c.Lifecycle.PreStop.HTTPGet.Path; got != "/prestop?sleep=7.5s" {
				t.Errorf("preStop path = %q, want /prestop?sleep=7.5s", got)
			}
			// 60s hold + 7.5s sleep + 10s margin = 77.5s, rounded up.
			if g := *wl.Deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 78 {
				t.Errorf("grace = %d, want 78", g)
			}
		}},
		{"broken canary", func(p *Params) {
			p.PreStop, p.ExitOnSigterm, p.ClockOffset = false, true, -2*time.Second
		}, func(t *testing.T, wl *Workload) {
			want := []string{"epwindow", "probe", "--listen=:8080", "--hold=1m0s", "--exit-on-sigterm", "--clock-offset=-2s"}
			if got := container(wl.Deployment).Command; !reflect.DeepEqual(got, want) {
				t.Errorf("command = %q, want %q", got, want)
			}
			// Exits on SIGTERM: no hold to cover, margin only.
			if g := *wl.Deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 10 {
				t.Errorf("grace = %d, want 10", g)
			}
		}},
		{"startup race", func(p *Params) {
			p.NoReadiness, p.ListenDelay = true, 3*time.Second
		}, func(t *testing.T, wl *Workload) {
			c := container(wl.Deployment)
			if c.ReadinessProbe != nil {
				t.Errorf("readinessProbe = %+v, want none", c.ReadinessProbe)
			}
			want := []string{"epwindow", "probe", "--listen=:8080", "--hold=1m0s", "--listen-delay=3s"}
			if !reflect.DeepEqual(c.Command, want) {
				t.Errorf("command = %q, want %q", c.Command, want)
			}
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
				t.Error("the preStop hook went with the readiness probe")
			}
		}},
		{"listen delay behind a readiness probe", func(p *Params) { p.ListenDelay = 1500 * time.Millisecond }, func(t *testing.T, wl *Workload) {
			c := container(wl.Deployment)
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("readinessProbe = %+v, want the base's httpGet /healthz", c.ReadinessProbe)
			}
			if got := c.Command[len(c.Command)-1]; got != "--listen-delay=1.5s" {
				t.Errorf("command ends with %q, want --listen-delay=1.5s", got)
			}
		}},
		{"explicit grace and port", func(p *Params) { p.GracePeriod, p.Port = 90*time.Second, 9090 }, func(t *testing.T, wl *Workload) {
			d := wl.Deployment
			if g := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 90 {
				t.Errorf("grace = %d, want 90", g)
			}
			c := container(d)
			if c.Ports[0].ContainerPort != 9090 || c.ReadinessProbe.HTTPGet.Port.IntVal != 9090 ||
				c.Lifecycle.PreStop.HTTPGet.Port.IntVal != 9090 || c.Command[2] != "--listen=:9090" {
				t.Errorf("container not on 9090: %+v", c)
			}
			if wl.Service.Spec.Ports[0].Port != 9090 || wl.Service.Spec.Ports[0].TargetPort.IntVal != 9090 ||
				wl.Ingress.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Port.Number != 9090 {
				t.Errorf("service/ingress not on 9090")
			}
		}},
		{"grace margin", func(p *Params) { p.GraceMargin = 4500 * time.Millisecond }, func(t *testing.T, wl *Workload) {
			// 60s hold + 4.5s margin, rounded up.
			if g := *wl.Deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 65 {
				t.Errorf("grace = %d, want 65", g)
			}
		}},
		{"default class", func(p *Params) { p.IngressClass, p.Host = "", "" }, func(t *testing.T, wl *Workload) {
			if wl.Ingress.Spec.IngressClassName != nil {
				t.Errorf("ingressClassName = %q, want none (cluster default)", *wl.Ingress.Spec.IngressClassName)
			}
			if h := wl.Ingress.Spec.Rules[0].Host; h != "" {
				t.Errorf("host = %q, want any", h)
			}
		}},
		{"class without overlay", func(p *Params) { p.IngressClass = "haproxy" }, func(t *testing.T, wl *Workload) {
			if c := wl.Ingress.Spec.IngressClassName; c == nil || *c != "haproxy" {
				t.Errorf("ingressClassName = %v, want haproxy", c)
			}
		}},
		{"class overrides overlay", func(p *Params) { p.IngressClass, p.Overlay = "nginx-internal", "nginx" }, func(t *testing.T, wl *Workload) {
			if c := wl.Ingress.Spec.IngressClassName; c == nil || *c != "nginx-internal" {
				t.Errorf("ingressClassName = %v, want nginx-internal", c)
			}
		}},
		{"no run id", func(p *Params) { p.RunID = "" }, func(t *testing.T, wl *Workload) {
			if _, ok := wl.Deployment.Spec.Selector.MatchLabels[LabelRunID]; ok {
				t.Errorf("selector has %s without a run id", LabelRunID)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParams()
			tt.mod(&p)
			tt.check(t, mustRender(t, p))
		})
	}
}

func TestRenderOverlays(t *testing.T) {
	want := []string{"alb", "contour", "nginx", "skipper", "traefik"}
	if got := Overlays(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Overlays() = %v, want %v", got, want)
	}
	for _, o := range want {
		t.Run(o, func(t *testing.T) {
			p := testParams()
			p.IngressClass = ""
			p.Overlay = o
			wl := mustRender(t, p)
			if c := wl.Ingress.Spec.IngressClassName; c == nil || *c != o {
				t.Errorf("ingressClassName = %v, want %q from the overlay", c, o)
			}
			// Chosen by class when no overlay is named.
			p.Overlay, p.IngressClass = "", o
			if got := p.OverlayFor(); got != o {
				t.Errorf("OverlayFor(class %q) = %q", o, got)
			}
			if o != "alb" {
				if len(wl.Ingress.Annotations) != 0 {
					t.Errorf("annotations = %v, want none: the overlay must not change the controller's behaviour", wl.Ingress.Annotations)
				}
				return
			}
			for k, v := range map[string]string{
				"alb.ingress.kubernetes.io/target-type":      "ip",
				"alb.ingress.kubernetes.io/scheme":           "internal",
				"alb.ingress.kubernetes.io/healthcheck-path": "/healthz",
			} {
				if got := wl.Ingress.Annotations[k]; got != v {
					t.Errorf("annotation %s = %q, want %q", k, got, v)
				}
			}
			if got := wl.Namespace.Labels["elbv2.k8s.aws/pod-readiness-gate-inject"]; got != "enabled" {
				t.Errorf("namespace readiness-gate label = %q, want enabled", got)
			}
		})
	}
	p := testParams()
	p.Overlay = "istio"
	if _, err := Render(p); err == nil || !strings.Contains(err.Error(), "--overlay") {
		t.Errorf("unknown overlay: err = %v, want one naming --overlay", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Params)
		want string // substring of the error; "" = valid
	}{
		{"valid", func(*Params) {}, ""},
		{"bad namespace", func(p *Params) { p.Namespace = "Epwindow" }, "--namespace"},
		{"bad name", func(p *Params) { p.Name = "1probe" }, "--name"},
		{"zero replicas", func(p *Params) { p.Replicas = 0 }, "--replicas"},
		{"no image", func(p *Params) { p.Image = "" }, "--image"},
		{"bad host", func(p *Params) { p.Host = "probe_1.example" }, "--host"},
		{"wildcard host", func(p *Params) { p.Host = "*.example.com" }, ""},
		{"bad class", func(p *Params) { p.IngressClass = "Nginx" }, "--ingress-class"},
		{"no hold", func(p *Params) { p.Hold = 0 }, "--hold"},
		{"negative sleep", func(p *Params) { p.PreStopSleep = -time.Second }, "--prestop-sleep"},
		{"sleep without hook", func(p *Params) { p.PreStop, p.PreStopSleep = false, time.Second }, "--prestop"},
		{"negative grace", func(p *Params) { p.GracePeriod = -time.Second }, "--grace"},
		{"negative margin", func(p *Params) { p.GraceMargin = -time.Second }, "--grace-margin"},
		{"grace shorter than hold", func(p *Params) { p.GracePeriod = 60 * time.Second }, "--grace (1m0s) must exceed --hold"},
		{"grace covers sleep when exiting", func(p *Params) {
			p.ExitOnSigterm, p.PreStopSleep, p.GracePeriod = true, 5*time.Second, 6*time.Second
		}, ""},
		{"bad port", func(p *Params) { p.Port = 70000 }, "port"},
		{"negative listen delay", func(p *Params) { p.ListenDelay = -time.Second }, "--listen-delay"},
		{"bad label", func(p *Params) { p.Labels = map[string]string{"a b": "c"} }, "--label"},
		{"reserved label", func(p *Params) { p.Labels = map[string]string{LabelManagedBy: "me"} }, "set by epwindow"},
		{"bad run id", func(p *Params) { p.RunID = "run id" }, "run id"},
		{"unknown route", func(p *Params) { p.Route = "grpcroute" }, `--route "grpcroute": want ingress or httproute`},
		{"httproute", func(p *Params) { *p = httpRouteParams() }, ""},
		{"httproute without gateway", func(p *Params) { *p = httpRouteParams(); p.Gateway = GatewayRef{} }, "--gateway NAMESPACE/NAME is required with --route httproute"},
		{"httproute with class", func(p *Params) { *p = httpRouteParams(); p.IngressClass = "nginx" }, "--ingress-class nginx applies to --route ingress only"},
		{"httproute with overlay", func(p *Params) { *p = httpRouteParams(); p.Overlay = "alb" }, "--overlay alb applies to --route ingress only"},
		{"httproute with bad section", func(p *Params) { *p = httpRouteParams(); p.Gateway.Section = "Web_1" }, "--gateway-section"},
		{"gateway with ingress", func(p *Params) { p.Gateway = GatewayRef{Namespace: "gw", Name: "traefik"} }, "--gateway gw/traefik applies to --route httproute only"},
		{"section with ingress", func(p *Params) { p.Gateway = GatewayRef{Section: "web"} }, "--gateway-section web applies to --route httproute only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParams()
			tt.mod(&p)
			err := p.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
			if _, rerr := Render(p); (rerr == nil) != (err == nil) {
				t.Errorf("Render error %v disagrees with Validate %v", rerr, err)
			}
		})
	}
}

// yamlDocs writes m as WriteYAML does and returns the stream and its
// documents; the server-filled fields of a typed object fail the test.
func yamlDocs(t *testing.T, m Manifest) (string, []string) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteYAML(&buf, m); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, noise := range []string{"status:", "creationTimestamp"} {
		if strings.Contains(out, noise) {
			t.Errorf("YAML contains %q:\n%s", noise, out)
		}
	}
	return out, strings.Split(out, "\n---\n")
}

// TestWriteYAMLRoundTrip: what `epwindow manifests` prints decodes back to
// exactly the rendered objects, so reviewing it is reviewing what is applied.
func TestWriteYAMLRoundTrip(t *testing.T) {
	wl := mustRender(t, testParams())
	out, docs := yamlDocs(t, wl)
	if len(docs) != 4 {
		t.Fatalf("got %d documents, want 4 (Namespace, Deployment, Service, Ingress):\n%s", len(docs), out)
	}
	got := &Workload{Namespace: &corev1.Namespace{}, Deployment: &appsv1.Deployment{}, Service: &corev1.Service{}, Ingress: &networkingv1.Ingress{}}
	for i, obj := range got.Objects() {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), obj); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
	}
	for i, obj := range got.Objects() {
		if want := wl.Objects()[i]; !apiequality.Semantic.DeepEqual(obj, want) {
			t.Errorf("document %d decodes to %+v, want %+v", i, obj, want)
		}
	}
	if !strings.HasPrefix(out, "apiVersion: v1\nkind: Namespace\n") {
		t.Errorf("YAML does not start with the Namespace:\n%s", out[:min(len(out), 200)])
	}
}

// TestKustomizeRBAC: the RBAC variants build from the embedded files.
func TestKustomizeRBAC(t *testing.T) {
	for _, dir := range []string{"rbac/cluster", "rbac/namespaced", "rbac/observer", "rbac/target"} {
		out, err := Kustomize(dir)
		if err != nil {
			t.Errorf("Kustomize(%q): %v", dir, err)
			continue
		}
		if !bytes.Contains(out, []byte("kind: ClusterRole")) && !bytes.Contains(out, []byte("kind: Role")) {
			t.Errorf("Kustomize(%q) has no role:\n%s", dir, out)
		}
	}
}

// TestBaseDefaults: the constants that describe the base agree with it.
func TestBaseDefaults(t *testing.T) {
	m, err := kustomize("base")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.Resources() {
		if r.GetKind() != "Deployment" {
			continue
		}
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict(data, &d); err != nil {
			t.Fatal(err)
		}
		c := container(&d)
		if c == nil {
			t.Fatalf("base has no container %q", ProbeContainer)
		}
		if c.Image != DefaultImage {
			t.Errorf("base image = %q, want DefaultImage %q", c.Image, DefaultImage)
		}
		if c.Ports[0].ContainerPort != DefaultPort {
			t.Errorf("base port = %d, want DefaultPort %d", c.Ports[0].ContainerPort, DefaultPort)
		}
		if d.Labels[LabelName] != NameValue || d.Labels[LabelManagedBy] != ManagedByValue {
			t.Errorf("base labels = %v", d.Labels)
		}
		return
	}
	t.Fatal("base has no Deployment")
}

// TestKustomizeOnDisk: `kustomize build deploy/overlays/<name>` (what a
// GitOps user applies) puts every object in the namespace it creates.
func TestKustomizeOnDisk(t *testing.T) {
	dirs := []string{HTTPRouteOverlay}
	for _, o := range Overlays() {
		dirs = append(dirs, "overlays/"+o)
	}
	for _, o := range dirs {
		m, err := kustomize(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.Resources() {
			switch r.GetKind() {
			case "Namespace":
				if r.GetName() != "epwindow" {
					t.Errorf("%s: Namespace %q, want epwindow", o, r.GetName())
				}
			default:
				if r.GetNamespace() != "epwindow" {
					t.Errorf("%s: %s %q in namespace %q, want epwindow", o, r.GetKind(), r.GetName(), r.GetNamespace())
				}
			}
		}
	}
}

func TestRenderStreams(t *testing.T) {
	p := testParams()
	p.StreamDrain, p.H2C = "close-jittered=5s", true
	wl, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	args := wl.Deployment.Spec.Template.Spec.Containers[0].Command
	if !slices.Contains(args, "--stream-drain=close-jittered=5s") {
		t.Errorf("probe args %q lack --stream-drain", args)
	}
	if got := wl.Service.Annotations[AnnotationTraefikScheme]; got != "h2c" {
		t.Errorf("service annotation %s = %q, want h2c", AnnotationTraefikScheme, got)
	}
	p.StreamDrain, p.H2C = "", false
	if wl, err = Render(p); err != nil {
		t.Fatal(err)
	}
	if _, ok := wl.Service.Annotations[AnnotationTraefikScheme]; ok || slices.ContainsFunc(wl.Deployment.Spec.Template.Spec.Containers[0].Command,
		func(a string) bool { return strings.HasPrefix(a, "--stream-drain") }) {
		t.Errorf("streams off, yet rendered: %v %q", wl.Service.Annotations, wl.Deployment.Spec.Template.Spec.Containers[0].Command)
	}
}

// KustomizeIn puts the target variant's Role and RoleBinding in the team's
// namespace; the cluster-scoped objects have none.
func TestKustomizeIn(t *testing.T) {
	out, err := KustomizeIn("rbac/target", "team-b")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "\n---\n")
	if len(docs) != 4 {
		t.Fatalf("%d objects, want a Role, a RoleBinding, a ClusterRole and its binding:\n%s", len(docs), out)
	}
	for _, doc := range docs {
		var obj struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		want := "team-b"
		if strings.HasPrefix(obj.Kind, "Cluster") {
			want = ""
		}
		if obj.Metadata.Namespace != want {
			t.Errorf("%s %s in namespace %q, want %q", obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace, want)
		}
	}
	if _, err := KustomizeIn("rbac/target", "Team B"); err == nil {
		t.Error("KustomizeIn took namespace \"Team B\"")
	}
}
