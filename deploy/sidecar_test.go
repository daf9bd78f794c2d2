package deploy

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// appDeployment is a team's Deployment: an app serving HTTP on 8080 and
// metrics on 9090 (TCP), DNS-ish on 5353 (UDP, not watched), and, with
// inits, an init container and a native sidecar of its own.
func appDeployment(inits bool) *appsv1.Deployment {
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "app",
					Image: "registry.example.com/web:v3",
					Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: 8080},
						{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
						{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
					},
				}}},
			},
		},
	}
	if inits {
		always := corev1.ContainerRestartPolicyAlways
		d.Spec.Template.Annotations = map[string]string{"team.example.com/owner": "a"}
		d.Spec.Template.Spec.InitContainers = []corev1.Container{
			{Name: "migrate", Image: "registry.example.com/web:v3", Command: []string{"migrate"}},
			{Name: "proxy", Image: "envoy:v1", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 15001}}},
		}
	}
	return d
}

func TestSidecarContainer(t *testing.T) {
	c, err := SidecarContainer(appDeployment(false).Spec.Template.Spec, SidecarOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != SidecarContainerName || c.Image != DefaultImage {
		t.Errorf("name, image = %q, %q; want %q, %q", c.Name, c.Image, SidecarContainerName, DefaultImage)
	}
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("restartPolicy = %v, want Always (a native sidecar)", c.RestartPolicy)
	}
	if want := []string{"epwindow", "sidecar"}; !slices.Equal(c.Command, want) {
		t.Errorf("command = %q, want %q", c.Command, want)
	}
	// Every TCP containerPort of the app, not the UDP one.
	if want := []string{"--listen=:9091", "--port=8080", "--port=9090", "--termination-log=/dev/termination-log"}; !slices.Equal(c.Args, want) {
		t.Errorf("args = %q, want %q", c.Args, want)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != DefaultSidecarPort || c.Ports[0].Name == "" {
		t.Errorf("ports = %+v, want one named port %d", c.Ports, DefaultSidecarPort)
	}
	p := c.StartupProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.IntValue() != int(DefaultSidecarPort) {
		t.Errorf("startupProbe = %+v, want httpGet /healthz on %d", p, DefaultSidecarPort)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("securityContext = %+v, want Pod Security restricted with a read-only root", sc)
	}
	// The benchmark's figures (deploy/sidecar/container.yaml).
	want := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("80Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	for name, q := range want.Requests {
		if got := c.Resources.Requests[name]; got.Cmp(q) != 0 {
			t.Errorf("requests %s = %s, want %s", name, got.String(), q.String())
		}
	}
	for name, q := range want.Limits {
		if got := c.Resources.Limits[name]; got.Cmp(q) != 0 {
			t.Errorf("limits %s = %s, want %s", name, got.String(), q.String())
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit: --max-cpu caps the dumps, throttling would stretch them")
	}
}

func TestSidecarContainerOptions(t *testing.T) {
	spec := appDeployment(true).Spec.Template.Spec
	c, err := SidecarContainer(spec, SidecarOptions{
		Image: "registry.example.com/epwindow:v1", Ports: []int32{8080}, Listen: 9191, Interval: 5 * time.Millisecond, RunID: "r1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--listen=:9191", "--port=8080", "--interval=5ms", "--termination-log=/dev/termination-log"}; !slices.Equal(c.Args, want) {
		t.Errorf("args = %q, want %q", c.Args, want)
	}
	if c.Image != "registry.example.com/epwindow:v1" || c.Ports[0].ContainerPort != 9191 || c.StartupProbe.HTTPGet.Port.IntValue() != 9191 {
		t.Errorf("image %q, port %d, probe port %s: want the options'", c.Image, c.Ports[0].ContainerPort, c.StartupProbe.HTTPGet.Port.String())
	}
}

func TestSidecarContainerBadInput(t *testing.T) {
	noPorts := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}}
	app := appDeployment(true).Spec.Template.Spec
	tests := []struct {
		name string
		spec corev1.PodSpec
		o    SidecarOptions
		want string
	}{
		{"no TCP containerPort", noPorts, SidecarOptions{}, "--port"},
		{"listen is an app port", app, SidecarOptions{Ports: []int32{8080}, Listen: 8080}, "8080"},
		// Every container shares the pod's network namespace.
		{"listen is another container's port", app, SidecarOptions{Ports: []int32{8080}, Listen: 15001}, "15001"},
		{"port out of range", app, SidecarOptions{Ports: []int32{0}}, "--port 0"},
		{"port twice", app, SidecarOptions{Ports: []int32{8080, 8080}}, "--port 8080"},
		{"listen out of range", app, SidecarOptions{Listen: 70000}, "70000"},
		{"interval too short", app, SidecarOptions{Interval: time.Microsecond}, "interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SidecarContainer(tt.spec, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// patched applies a strategic-merge patch to d as the API server does.
func patched(t *testing.T, d *appsv1.Deployment, patch []byte) *appsv1.Deployment {
	t.Helper()
	orig, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(orig, patch, appsv1.Deployment{})
	if err != nil {
		t.Fatalf("apply %s: %v", patch, err)
	}
	var got appsv1.Deployment
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Adding then removing the sidecar gives back the template exactly: the
// Deployment rolls back to its own ReplicaSet, nothing of the tool left.
func TestSidecarPatchRoundTrip(t *testing.T) {
	for _, inits := range []bool{false, true} {
		d := appDeployment(inits)
		name := "no init containers"
		if inits {
			name = "own init containers and annotations"
		}
		t.Run(name, func(t *testing.T) {
			patch, err := SidecarPatch(d, SidecarOptions{RunID: "x7k2q"})
			if err != nil {
				t.Fatal(err)
			}
			added := patched(t, d, patch)
			tmpl := added.Spec.Template
			if got := tmpl.Annotations[SidecarRunAnnotation]; got != "x7k2q" {
				t.Errorf("annotation %s = %q, want the run id", SidecarRunAnnotation, got)
			}
			// A patch's new list items come first (strategicpatch's merge,
			// and kustomize's): the sidecar starts before the Deployment's
			// own init containers and is stopped after all of them.
			inits := tmpl.Spec.InitContainers
			own := d.Spec.Template.Spec.InitContainers
			if len(inits) != len(own)+1 || inits[0].Name != SidecarContainerName {
				t.Fatalf("init containers = %+v, want %s then the Deployment's", inits, SidecarContainerName)
			}
			want, err := SidecarContainer(d.Spec.Template.Spec, SidecarOptions{RunID: "x7k2q"})
			if err != nil {
				t.Fatal(err)
			}
			if g, w := mustJSON(t, inits[0]), mustJSON(t, want); g != w {
				t.Errorf("patched sidecar\n%s\nwant SidecarContainer's\n%s", g, w)
			}
			if len(own) > 0 {
				if g, w := mustJSON(t, inits[1:]), mustJSON(t, own); g != w {
					t.Errorf("the Deployment's own init containers changed:\n%s\nwant\n%s", g, w)
				}
			}
			if g, w := mustJSON(t, tmpl.Spec.Containers), mustJSON(t, d.Spec.Template.Spec.Containers); g != w {
				t.Errorf("the app's containers changed:\n%s\nwant\n%s", g, w)
			}

			removed := patched(t, added, SidecarRemovePatch())
			if g, w := mustJSON(t, removed.Spec.Template), mustJSON(t, d.Spec.Template); g != w {
				t.Errorf("after the remove patch the template is\n%s\nwant the original\n%s", g, w)
			}
			// Removing twice (Ctrl-C during the cleanup) is harmless.
			again := patched(t, removed, SidecarRemovePatch())
			if g, w := mustJSON(t, again.Spec.Template), mustJSON(t, d.Spec.Template); g != w {
				t.Errorf("a second remove patch changed the template:\n%s\nwant\n%s", g, w)
			}
		})
	}
}

// A template that has the sidecar already (another run's, or the team's
// own overlay) is not patched again.
func TestSidecarPatchPresent(t *testing.T) {
	d := appDeployment(true)
	withRun := patched(t, d, mustPatch(t, d, SidecarOptions{RunID: "first"}))
	_, err := SidecarPatch(withRun, SidecarOptions{RunID: "second"})
	if !errors.Is(err, ErrSidecarPresent) || !strings.Contains(err.Error(), "first") {
		t.Errorf("err = %v, want ErrSidecarPresent naming run first", err)
	}
	if c, run := TemplateSidecar(withRun.Spec.Template); c == nil || run != "first" {
		t.Errorf("TemplateSidecar = %v, %q; want the container and run first", c, run)
	}
	// The kept patch (no run id) adds no annotation.
	kept := patched(t, d, mustPatch(t, d, SidecarOptions{}))
	if _, ok := kept.Spec.Template.Annotations[SidecarRunAnnotation]; ok {
		t.Errorf("a patch without run id set %s", SidecarRunAnnotation)
	}
	if c, run := TemplateSidecar(kept.Spec.Template); c == nil || run != "" {
		t.Errorf("TemplateSidecar = %v, %q; want the container, no run", c, run)
	}
	if _, err := SidecarPatch(kept, SidecarOptions{RunID: "second"}); !errors.Is(err, ErrSidecarPresent) {
		t.Errorf("err = %v, want ErrSidecarPresent", err)
	}
	if c, _ := TemplateSidecar(d.Spec.Template); c != nil {
		t.Errorf("TemplateSidecar found %v in a template without it", c)
	}
}

func mustPatch(t *testing.T, d *appsv1.Deployment, o SidecarOptions) []byte {
	t.Helper()
	p, err := SidecarPatch(d, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The component, kept in a staging overlay, adds the same container when
// kustomize builds the overlay.
func TestSidecarComponent(t *testing.T) {
	d := appDeployment(true)
	comp, err := SidecarComponent(d.Name, d.Spec.Template.Spec, SidecarOptions{Ports: []int32{8080}, RunID: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	base, err := yaml.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	mem := filesys.MakeFsInMemory()
	for p, data := range map[string]string{
		"/app/base/deployment.yaml":                           string(base),
		"/app/base/kustomization.yaml":                        "resources: [deployment.yaml]\n",
		"/app/components/epwindow-sidecar/kustomization.yaml": string(comp),
		"/app/staging/kustomization.yaml":                     "resources: [../base]\ncomponents: [../components/epwindow-sidecar]\n",
	} {
		if err := mem.WriteFile(p, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/app/staging")
	if err != nil {
		t.Fatalf("kustomize build staging:\n%s\n%v", comp, err)
	}
	if n := len(m.Resources()); n != 1 {
		t.Fatalf("%d resources, want the Deployment", n)
	}
	out, err := m.Resources()[0].AsYAML()
	if err != nil {
		t.Fatal(err)
	}
	var got appsv1.Deployment
	if err := yaml.UnmarshalStrict(out, &got); err != nil {
		t.Fatal(err)
	}
	want, err := SidecarContainer(d.Spec.Template.Spec, SidecarOptions{Ports: []int32{8080}})
	if err != nil {
		t.Fatal(err)
	}
	kept := d.DeepCopy()
	kept.Spec.Template.Spec.InitContainers = append([]corev1.Container{want}, kept.Spec.Template.Spec.InitContainers...)
	if g, w := mustJSON(t, got.Spec.Template), mustJSON(t, kept.Spec.Template); g != w {
		t.Errorf("staging overlay's template\n%s\nwant the Deployment's with the sidecar\n%s", g, w)
	}
	// Another Deployment in the overlay is left alone: the patch targets NAME.
	other, err := SidecarComponent("api", d.Spec.Template.Spec, SidecarOptions{Ports: []int32{8080}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(other), "name: api") || strings.Contains(string(other), "name: web") {
		t.Errorf("component for api:\n%s", other)
	}
}

// The app's pod with the sidecar passes Pod Security restricted: the probe
// workload's pod stands for a compliant app.
func TestPodSecurityRestrictedSidecar(t *testing.T) {
	d := mustRender(t, testParams()).Deployment
	withSidecar := patched(t, d, mustPatch(t, d, SidecarOptions{RunID: "x7k2q"}))
	tmpl := withSidecar.Spec.Template
	if res := restricted(t, &tmpl.ObjectMeta, &tmpl.Spec); !res.Allowed {
		t.Errorf("pod with the sidecar violates PodSecurity restricted: %s: %s", res.ForbiddenReason(), res.ForbiddenDetail())
	}
	// The checker reads init containers: without drop ALL the sidecar fails.
	tmpl.Spec.InitContainers[0].SecurityContext.Capabilities = nil
	if res := restricted(t, &tmpl.ObjectMeta, &tmpl.Spec); res.Allowed {
		t.Error("a sidecar without capabilities.drop=ALL passes restricted: the checker does not see it")
	}
}
