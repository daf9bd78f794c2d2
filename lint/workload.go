package lint

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// templatePaths are where each workload kind keeps its pod template.
var templatePaths = map[string][]any{
	"Deployment":  {"spec", "template"},
	"StatefulSet": {"spec", "template"},
	"DaemonSet":   {"spec", "template"},
	"ReplicaSet":  {"spec", "template"},
	"Job":         {"spec", "template"},
	"CronJob":     {"spec", "jobTemplate", "spec", "template"},
	"Pod":         {},
}

// WorkloadKinds are the kinds lint checks, sorted.
func WorkloadKinds() []string {
	return []string{"CronJob", "DaemonSet", "Deployment", "Job", "Pod", "ReplicaSet", "StatefulSet"}
}

// workload is an object's pod template, decoded.
type workload struct {
	obj      *Object
	template corev1.PodTemplateSpec
	// at is the path to the template (metadata and spec under it).
	at []any
	// annotations merges the object's and the template's (the
	// template's win).
	annotations map[string]string
}

func (w *workload) path(rest ...any) []any {
	out := append([]any{}, w.at...)
	return append(out, rest...)
}

// asWorkload decodes o's pod template; ok is false for kinds without one.
func asWorkload(o *Object) (*workload, bool, error) {
	at, ok := templatePaths[o.Kind]
	if !ok || !strings.HasPrefix(o.APIVersion, apiGroupOf(o.Kind)) {
		return nil, false, nil
	}
	var v any = o.Raw
	for _, seg := range at {
		m, _ := v.(map[string]any)
		v = m[seg.(string)]
	}
	w := &workload{obj: o, at: at}
	if v != nil {
		if err := decodeInto(v, &w.template); err != nil {
			return nil, true, fmt.Errorf("%s: decode its pod template: %w", o.Ref(), err)
		}
	}
	w.annotations = annotations(o)
	for k, v := range w.template.Annotations {
		w.annotations[k] = v
	}
	return w, true, nil
}

// apiGroupOf is the apiVersion prefix a workload kind has.
func apiGroupOf(kind string) string {
	switch kind {
	case "Pod":
		return "v1"
	case "Job", "CronJob":
		return "batch/"
	}
	return "apps/"
}

// servingContainers are the indexes of the containers that receive traffic:
// those that declare a port, or, when none does but a Service selects the
// pod, all of them (the Service's targetPort may be a number the container
// never declares).
func (w *workload) servingContainers(selected bool) []int {
	var out []int
	for i, c := range w.template.Spec.Containers {
		if len(c.Ports) > 0 {
			out = append(out, i)
		}
	}
	if len(out) == 0 && selected {
		for i := range w.template.Spec.Containers {
			out = append(out, i)
		}
	}
	return out
}

// selectedBy reports whether a Service's selector picks the pod template.
func (w *workload) selectedBy(svc *corev1.Service, svcNamespace string) bool {
	if len(svc.Spec.Selector) == 0 || svcNamespace != w.obj.Namespace {
		return false
	}
	return labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels))
}

// distroless reports whether the annotation marks container name's image
// distroless, or its image name says so.
func (w *workload) distroless(c *corev1.Container) bool {
	if strings.Contains(c.Image, "distroless") {
		return true
	}
	v, ok := w.annotations[AnnotationDistroless]
	if !ok {
		return false
	}
	if v == "true" || v == "*" {
		return true
	}
	for _, n := range strings.Split(v, ",") {
		if strings.TrimSpace(n) == c.Name {
			return true
		}
	}
	return false
}
