package deploy

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// Objects returns the workload's objects in apply order (Namespace first);
// nil ones are left out.
func (wl *Workload) Objects() []any {
	var out []any
	if wl.Namespace != nil {
		out = append(out, wl.Namespace)
	}
	if wl.Deployment != nil {
		out = append(out, wl.Deployment)
	}
	if wl.Service != nil {
		out = append(out, wl.Service)
	}
	if wl.Headless != nil {
		out = append(out, wl.Headless)
	}
	if wl.Ingress != nil {
		out = append(out, wl.Ingress)
	}
	if wl.HTTPRoute != nil {
		out = append(out, wl.HTTPRoute)
	}
	return out
}

// Manifest is a set of rendered objects in apply order: a Workload or a
// Schedule.
type Manifest interface {
	Objects() []any
}

// WriteYAML writes the objects as a multi-document YAML stream in apply
// order, without the empty status and creationTimestamp fields a typed
// object would otherwise print: what `kubectl apply -f -` takes.
func WriteYAML(w io.Writer, m Manifest) error {
	for i, obj := range m.Objects() {
		data, err := objectYAML(obj)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}

// objectYAML marshals obj, dropping the fields only the server fills in.
func objectYAML(obj any) ([]byte, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", obj, err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("marshal %T: %w", obj, err)
	}
	delete(m, "status")
	if spec, ok := m["spec"].(map[string]any); ok && len(spec) == 0 {
		delete(m, "spec") // a Namespace's
	}
	dropCreationTimestamp(m)
	return yaml.Marshal(m)
}

// dropCreationTimestamp deletes the null creationTimestamp of every
// metadata in obj: the object's, and its templates' (a Deployment's pod
// template, a CronJob's job template and its pod template).
func dropCreationTimestamp(obj map[string]any) {
	for k, v := range obj {
		sub, ok := v.(map[string]any)
		if !ok {
			continue
		}
		if k == "metadata" {
			if ts, ok := sub["creationTimestamp"]; ok && ts == nil {
				delete(sub, "creationTimestamp")
			}
			continue
		}
		dropCreationTimestamp(sub)
	}
}
