package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// SidecarContainerName is the native sidecar's name in the pod template:
// the strategic-merge patches add and delete the init container by it.
const SidecarContainerName = "epwindow-sidecar"

// DefaultSidecarPort is the sidecar's own port (its --listen, ":9091" by
// default): /timeline, /clock and /healthz.
const DefaultSidecarPort int32 = 9091

// SidecarRunAnnotation is set on the pod template by SidecarPatch to the run
// id: it marks what `measure --target` added, and lets a second run on the
// same Deployment refuse.
const SidecarRunAnnotation = "epwindow.dev/sidecar-run"

// sidecarTerminationLog is where the sidecar writes its record at SIGTERM:
// the container's terminationMessagePath, the sidecar's default.
const sidecarTerminationLog = "/dev/termination-log"

// The interval the sidecar accepts (sidecar.Config.Validate).
const (
	minSidecarInterval = time.Millisecond
	maxSidecarInterval = time.Minute
)

// ErrSidecarPresent is returned by SidecarPatch for a template that has the
// sidecar already.
var ErrSidecarPresent = errors.New("the pod template has the epwindow sidecar already")

// SidecarOptions are the sidecar's settings in a team's pod.
type SidecarOptions struct {
	// Image has epwindow on PATH; "" means DefaultImage.
	Image string
	// Ports are the app's ports the sidecar watches (--port); empty means
	// every TCP containerPort of the template's regular containers.
	Ports []int32
	// Listen is the sidecar's own port; 0 means DefaultSidecarPort. It must
	// not be a port of any container: they share the network namespace.
	Listen int32
	// Interval is the sidecar's --interval; 0 means its default (10ms).
	Interval time.Duration
	// RunID is set as SidecarRunAnnotation by SidecarPatch; "" (a patch a
	// team keeps) sets no annotation.
	RunID string
}

// SidecarContainer returns the `epwindow sidecar` native sidecar for a pod
// with spec: the container of deploy/sidecar/container.yaml (restartPolicy
// Always, startupProbe on /healthz, Pod Security restricted, resources from
// the sidecar's benchmark) with o's image, ports and interval.
func SidecarContainer(spec corev1.PodSpec, o SidecarOptions) (corev1.Container, error) {
	var c corev1.Container
	data, err := files.ReadFile("sidecar/container.yaml")
	if err != nil {
		return c, fmt.Errorf("deploy/sidecar/container.yaml: %w", err)
	}
	// Strict: a field the typed API does not know is a typo in the YAML.
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return c, fmt.Errorf("deploy/sidecar/container.yaml: %w", err)
	}
	ports, listen, err := o.resolve(spec)
	if err != nil {
		return c, err
	}
	c.Name = SidecarContainerName
	if o.Image != "" {
		c.Image = o.Image
	}
	c.Args = []string{"--listen=:" + strconv.Itoa(int(listen))}
	for _, p := range ports {
		c.Args = append(c.Args, "--port="+strconv.Itoa(int(p)))
	}
	if o.Interval != 0 {
		c.Args = append(c.Args, "--interval="+o.Interval.String())
	}
	c.Args = append(c.Args, "--termination-log="+sidecarTerminationLog)
	c.TerminationMessagePath = sidecarTerminationLog
	if len(c.Ports) != 1 || c.StartupProbe == nil || c.StartupProbe.HTTPGet == nil {
		return c, errors.New("deploy/sidecar/container.yaml: want one containerPort and an httpGet startupProbe")
	}
	c.Ports[0].ContainerPort = listen
	c.StartupProbe.HTTPGet.Port = intstr.FromInt32(listen)
	return c, nil
}

// resolve returns the app's ports and the sidecar's own, checked against
// the pod's containers.
func (o SidecarOptions) resolve(spec corev1.PodSpec) ([]int32, int32, error) {
	ports := o.Ports
	if len(ports) == 0 {
		for _, c := range spec.Containers {
			for _, p := range c.Ports {
				if (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) && !slices.Contains(ports, p.ContainerPort) {
					ports = append(ports, p.ContainerPort)
				}
			}
		}
		if len(ports) == 0 {
			return nil, 0, errors.New("the pod's containers declare no TCP containerPort: name the app's port(s) with --port")
		}
	}
	var errs []error
	for i, p := range ports {
		switch {
		case p < 1 || p > 65535:
			errs = append(errs, fmt.Errorf("--port %d: must be 1-65535", p))
		case slices.Contains(ports[:i], p):
			errs = append(errs, fmt.Errorf("--port %d given twice", p))
		}
	}
	listen := o.Listen
	if listen == 0 {
		listen = DefaultSidecarPort
	}
	if listen < 1 || listen > 65535 {
		errs = append(errs, fmt.Errorf("the sidecar's port %d: must be 1-65535", listen))
	} else if slices.Contains(ports, listen) {
		errs = append(errs, fmt.Errorf("the sidecar's port %d is also an app port (--port): give the sidecar another port", listen))
	} else {
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			for _, p := range c.Ports {
				if p.ContainerPort == listen && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
					errs = append(errs, fmt.Errorf("the sidecar's port %d is container %q's port (the pod shares one network namespace): give the sidecar another port", listen, c.Name))
				}
			}
		}
	}
	if o.Interval != 0 && (o.Interval < minSidecarInterval || o.Interval > maxSidecarInterval) {
		errs = append(errs, fmt.Errorf("the sidecar's --interval (%s) must be between %s and %s", o.Interval, minSidecarInterval, maxSidecarInterval))
	}
	return ports, listen, errors.Join(errs...)
}

// TemplateSidecar returns the sidecar container of a pod template, if it
// has one, and the run that added it (SidecarRunAnnotation; "" when the
// Deployment's own manifests keep it, e.g. through SidecarComponent).
func TemplateSidecar(t corev1.PodTemplateSpec) (*corev1.Container, string) {
	for _, cs := range [][]corev1.Container{t.Spec.InitContainers, t.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == SidecarContainerName {
				return &cs[i], t.Annotations[SidecarRunAnnotation]
			}
		}
	}
	return nil, ""
}

// sidecarPatch is the strategic-merge patch that adds c (initContainers
// merge by name: k8s.io/api/core/v1/types.go's patchMergeKey) and, with
// runID, the run annotation. A merged list puts the patch's new items
// first (apimachinery's strategicpatch, and kustomize's merge alike), so the
// sidecar is the first init container: it starts before the Deployment's
// own (its startupProbe holds them until the baseline dump) and, stopped in
// reverse order, outlives every other container of the pod.
func sidecarPatch(name string, c corev1.Container, runID string) map[string]any {
	tmpl := map[string]any{
		"spec": map[string]any{"initContainers": []corev1.Container{c}},
	}
	if runID != "" {
		tmpl["metadata"] = map[string]any{"annotations": map[string]string{SidecarRunAnnotation: runID}}
	}
	p := map[string]any{"spec": map[string]any{"template": tmpl}}
	if name != "" {
		p["apiVersion"], p["kind"] = "apps/v1", "Deployment"
		p["metadata"] = map[string]any{"name": name}
	}
	return p
}

// SidecarPatch returns the strategic-merge patch (JSON) that adds the
// sidecar to d's pod template and sets
// SidecarRunAnnotation to o.RunID. A template that has the sidecar already
// is refused (ErrSidecarPresent).
func SidecarPatch(d *appsv1.Deployment, o SidecarOptions) ([]byte, error) {
	if c, run := TemplateSidecar(d.Spec.Template); c != nil {
		if run != "" {
			return nil, fmt.Errorf("deployment %s: %w, added by run %s: that run is still measuring it, or was stopped before removing it (then: kubectl patch deployment %s --type strategic -p '%s')",
				d.Name, ErrSidecarPresent, run, d.Name, SidecarRemovePatch())
		}
		return nil, fmt.Errorf("deployment %s: %w (container %s, kept by its own manifests)", d.Name, ErrSidecarPresent, SidecarContainerName)
	}
	c, err := SidecarContainer(d.Spec.Template.Spec, o)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: %w", d.Name, err)
	}
	return json.Marshal(sidecarPatch("", c, o.RunID))
}

// SidecarRemovePatch returns the strategic-merge patch (JSON) that deletes
// the sidecar from a Deployment's pod template and the run annotation,
// leaving the template as it was before SidecarPatch. Applied to a template
// without them it changes nothing.
func SidecarRemovePatch() []byte {
	return []byte(`{"spec":{"template":{"metadata":{"annotations":{"` + SidecarRunAnnotation + `":null}},` +
		`"spec":{"initContainers":[{"$patch":"delete","name":"` + SidecarContainerName + `"}]}}}}`)
}

// SidecarComponent returns a kustomize Component (kustomization.yaml) that
// adds the sidecar to the Deployment name, whose pod has spec: for a team to
// keep it in a staging overlay (components: [path/to/it]). It sets no run
// annotation: the sidecar is the Deployment's own.
func SidecarComponent(name string, spec corev1.PodSpec, o SidecarOptions) ([]byte, error) {
	c, err := SidecarContainer(spec, o)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: %w", name, err)
	}
	patch, err := yaml.Marshal(sidecarPatch(name, c, ""))
	if err != nil {
		return nil, fmt.Errorf("deployment %s: marshal the sidecar patch: %w", name, err)
	}
	comp := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1alpha1",
		"kind":       "Component",
		"patches": []map[string]any{{
			"target": map[string]string{"group": "apps", "kind": "Deployment", "name": name},
			"patch":  string(patch),
		}},
	}
	out, err := yaml.Marshal(comp)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: marshal the component: %w", name, err)
	}
	header := fmt.Sprintf("# epwindow's sidecar for Deployment %s (docs/sidecar.md): list this folder\n"+
		"# under `components:` of the overlay that should run it.\n", name)
	return append([]byte(header), out...), nil
}
