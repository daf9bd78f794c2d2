package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

// basePath is the PATH of a container whose env does not set one (an
// image's config would normally provide it).
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// podRuntimeInfo is what the agent knows about a pod beyond its spec,
// needed by fieldRef env vars.
type podRuntimeInfo struct {
	PodIP  string
	HostIP string
	// ServiceEnv comes first in every container's environment, below
	// anything the container sets itself (see serviceEnv).
	ServiceEnv []v1.EnvVar
}

// containerEnv resolves a container's environment as the kubelet does
// (pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables): envFrom sources
// first, then env entries in order, each value expanded with $(VAR)
// against the variables defined before it. ConfigMap and Secret references
// are read through client. info.ServiceEnv (the kubernetes Service's
// variables) comes first and can be referenced and overridden; the other
// Services' links are not injected.
// The result also sets HOSTNAME (pod name) and, unless the pod sets it,
// PATH, as a runtime and an image would.
func containerEnv(ctx context.Context, client kubernetes.Interface, pod *v1.Pod, c *v1.Container, info podRuntimeInfo) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, e := range info.ServiceEnv {
		set(e.Name, e.Value)
	}
	for _, ef := range c.EnvFrom {
		data, err := envFromData(ctx, client, pod.Namespace, ef)
		if err != nil {
			return nil, err
		}
		for k, v := range data {
			set(ef.Prefix+k, v)
		}
	}
	mapping := expansion.MappingFuncFor(vars)
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expansion.Expand(e.Value, mapping))
			continue
		}
		v, ok, err := envValueFrom(ctx, client, pod, c, e.ValueFrom, info)
		if err != nil {
			return nil, fmt.Errorf("env %s of container %s: %w", e.Name, c.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	env := []string{"HOSTNAME=" + pod.Name}
	if _, ok := vars["PATH"]; !ok {
		env = append(env, "PATH="+basePath)
	}
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

// envValueFrom resolves one valueFrom; ok is false for an optional
// reference that does not exist (the variable is then left out).
func envValueFrom(ctx context.Context, client kubernetes.Interface, pod *v1.Pod, c *v1.Container, src *v1.EnvVarSource, info podRuntimeInfo) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := podFieldValue(pod, src.FieldRef.FieldPath, info)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		return resourceFieldValue(c, src.ResourceFieldRef), true, nil
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		cm, err := client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return "", false, optional(r.Optional, fmt.Errorf("configmap %s: %w", r.Name, err))
		}
		v, ok := cm.Data[r.Key]
		if !ok {
			return "", false, optional(r.Optional, fmt.Errorf("configmap %s has no key %q", r.Name, r.Key))
		}
		return v, true, nil
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		s, err := client.CoreV1().Secrets(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return "", false, optional(r.Optional, fmt.Errorf("secret %s: %w", r.Name, err))
		}
		v, ok := s.Data[r.Key]
		if !ok {
			return "", false, optional(r.Optional, fmt.Errorf("secret %s has no key %q", r.Name, r.Key))
		}
		return string(v), true, nil
	}
	return "", false, errors.New("unsupported valueFrom source")
}

// optional drops err when the reference is optional.
func optional(opt *bool, err error) error {
	if opt != nil && *opt {
		return nil
	}
	return err
}

// podFieldValue is a fieldRef's value (pkg/kubelet/kubelet_pods.go,
// podFieldSelectorRuntimeValue, and pkg/fieldpath).
func podFieldValue(pod *v1.Pod, path string, info podRuntimeInfo) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return info.PodIP, nil
	case "status.hostIP", "status.hostIPs":
		return info.HostIP, nil
	}
	for _, m := range []struct {
		prefix string
		from   map[string]string
	}{{"metadata.labels['", pod.Labels}, {"metadata.annotations['", pod.Annotations}} {
		if strings.HasPrefix(path, m.prefix) && strings.HasSuffix(path, "']") {
			return m.from[strings.TrimSuffix(strings.TrimPrefix(path, m.prefix), "']")], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// resourceFieldValue renders limits/requests like the kubelet's
// resource.ExtractContainerResourceValue (cpu in whole cores rounded up,
// memory in bytes); an unset limit has no node value here, so it is empty.
func resourceFieldValue(c *v1.Container, r *v1.ResourceFieldSelector) string {
	list := c.Resources.Limits
	name := strings.TrimPrefix(r.Resource, "limits.")
	if strings.HasPrefix(r.Resource, "requests.") {
		list = c.Resources.Requests
		name = strings.TrimPrefix(r.Resource, "requests.")
	}
	q, ok := list[v1.ResourceName(name)]
	if !ok {
		return ""
	}
	if name == "cpu" {
		div := int64(1000)
		if !r.Divisor.IsZero() {
			div = r.Divisor.MilliValue()
		}
		return fmt.Sprint((q.MilliValue() + div - 1) / div)
	}
	div := int64(1)
	if !r.Divisor.IsZero() {
		div = r.Divisor.Value()
	}
	return fmt.Sprint((q.Value() + div - 1) / div)
}

func envFromData(ctx context.Context, client kubernetes.Interface, ns string, ef v1.EnvFromSource) (map[string]string, error) {
	switch {
	case ef.ConfigMapRef != nil:
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, optional(ef.ConfigMapRef.Optional, fmt.Errorf("envFrom configmap %s: %w", ef.ConfigMapRef.Name, err))
		}
		return cm.Data, nil
	case ef.SecretRef != nil:
		s, err := client.CoreV1().Secrets(ns).Get(ctx, ef.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, optional(ef.SecretRef.Optional, fmt.Errorf("envFrom secret %s: %w", ef.SecretRef.Name, err))
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// envMap turns KEY=VALUE pairs into a map (later entries win).
func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// containerCommand maps a container's command and args to a local binary
// and argv, expanding $(VAR) references with the container's env as the
// kubelet does (pkg/kubelet/container/helpers.go, ExpandContainerCommandAndArgs).
// command[0]'s base name is looked up in binDir; when absent there,
// command[0] is resolved on this machine's PATH. argv[0] stays command[0].
func containerCommand(binDir string, c *v1.Container, env []string) (string, []string, error) {
	if len(c.Command) == 0 {
		return "", nil, fmt.Errorf("container %s has no command: images are not run here, the command must name a binary in %s", c.Name, binDir)
	}
	mapping := expansion.MappingFuncFor(envMap(env))
	var argv []string
	for _, s := range append(append([]string(nil), c.Command...), c.Args...) {
		argv = append(argv, expansion.Expand(s, mapping))
	}
	name := argv[0]
	cand := filepath.Join(binDir, filepath.Base(name))
	if st, err := os.Stat(cand); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return cand, argv, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", nil, fmt.Errorf("container %s: %s is neither in %s nor on this machine's PATH", c.Name, name, binDir)
	}
	if !filepath.IsAbs(p) {
		if p, err = filepath.Abs(p); err != nil {
			return "", nil, err
		}
	}
	return p, argv, nil
}
