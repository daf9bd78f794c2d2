package nodeagent

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func fieldEnv(name, path string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}}
}

func TestContainerEnv(t *testing.T) {
	client := fake.NewClientset(
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"MODE": "fast", "LEVEL": "3"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Data: map[string][]byte{"token": []byte("t0k")}},
	)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-1", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"app": "web"}},
		Spec:       v1.PodSpec{NodeName: "node-0", ServiceAccountName: "sa"},
	}
	c := &v1.Container{
		Name:    "app",
		EnvFrom: []v1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
		Env: []v1.EnvVar{
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_UID", "metadata.uid"),
			fieldEnv("POD_IP", "status.podIP"),
			fieldEnv("HOST_IP", "status.hostIP"),
			fieldEnv("NODE_NAME", "spec.nodeName"),
			fieldEnv("APP", "metadata.labels['app']"),
			{Name: "URL", Value: "http://$(POD_IP):8080/$(CM_MODE)"},
			{Name: "ESCAPED", Value: "$$(POD_IP)"},
			{Name: "TOKEN", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Key: "token"}}},
			{Name: "MISSING", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Key: "k", Optional: ptr.To(true)}}},
		},
	}
	env, err := containerEnv(context.Background(), client, pod, c, podRuntimeInfo{PodIP: "10.244.0.5", HostIP: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	got := envMap(env)
	want := map[string]string{
		"HOSTNAME": "p-1", "PATH": basePath, "CM_MODE": "fast", "CM_LEVEL": "3",
		"POD_NAME": "p-1", "POD_NAMESPACE": "ns", "POD_UID": "uid-1", "POD_IP": "10.244.0.5",
		"HOST_IP": "127.0.0.1", "NODE_NAME": "node-0", "APP": "web",
		"URL": "http://10.244.0.5:8080/fast", "ESCAPED": "$(POD_IP)", "TOKEN": "t0k",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["MISSING"]; ok {
		t.Error("optional missing configmap key was set")
	}
	// Env entries keep their order after envFrom ones.
	if i, j := slices.Index(env, "POD_NAME=p-1"), slices.Index(env, "URL=http://10.244.0.5:8080/fast"); i < 0 || j < i {
		t.Errorf("order of %v", env)
	}

	c.Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Key: "k"}}}}
	if _, err := containerEnv(context.Background(), client, pod, c, podRuntimeInfo{}); err == nil {
		t.Error("a required missing configmap was accepted")
	}
}

func TestResourceFieldValue(t *testing.T) {
	c := &v1.Container{Resources: v1.ResourceRequirements{
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
	}}
	for _, tc := range []struct {
		sel  v1.ResourceFieldSelector
		want string
	}{
		{v1.ResourceFieldSelector{Resource: "limits.cpu"}, "2"},
		{v1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}, "250"},
		{v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}, "64"},
		{v1.ResourceFieldSelector{Resource: "requests.memory"}, ""},
	} {
		if got := resourceFieldValue(c, &tc.sel); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.sel.Resource, got, tc.want)
		}
	}
}

func TestContainerCommand(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "epwindow"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "notexec"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PORT=8080", "HOSTNAME=p"}
	for _, tc := range []struct {
		name     string
		command  []string
		args     []string
		wantPath string
		wantArgv []string
		wantErr  string
	}{
		{"base name in bin dir", []string{"epwindow", "probe"}, []string{"--port=$(PORT)"}, filepath.Join(bin, "epwindow"), []string{"epwindow", "probe", "--port=8080"}, ""},
		{"image path maps by base name", []string{"/usr/local/bin/epwindow"}, []string{"probe"}, filepath.Join(bin, "epwindow"), []string{"/usr/local/bin/epwindow", "probe"}, ""},
		{"host PATH fallback", []string{"sh", "-c", "sleep 1"}, nil, "", []string{"sh", "-c", "sleep 1"}, ""},
		{"not executable in bin dir, not on PATH", []string{"notexec"}, nil, "", nil, "neither in"},
		{"no command", nil, []string{"probe"}, "", nil, "no command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, argv, err := containerCommand(bin, &v1.Container{Name: "c", Command: tc.command, Args: tc.args}, env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantPath != "" && path != tc.wantPath {
				t.Errorf("path %q, want %q", path, tc.wantPath)
			}
			if tc.wantPath == "" && !filepath.IsAbs(path) {
				t.Errorf("PATH fallback gave relative path %q", path)
			}
			if !slices.Equal(argv, tc.wantArgv) {
				t.Errorf("argv %q, want %q", argv, tc.wantArgv)
			}
		})
	}
}

func TestHTTPGetURLAndPorts(t *testing.T) {
	c := &v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	for _, tc := range []struct {
		h    v1.HTTPGetAction
		want string
	}{
		{v1.HTTPGetAction{Path: "/prestop", Port: intstr.FromString("http")}, "http://10.244.0.9:8080/prestop"},
		{v1.HTTPGetAction{Path: "healthz?x=1", Port: intstr.FromInt32(9000)}, "http://10.244.0.9:9000/healthz?x=1"},
		{v1.HTTPGetAction{Port: intstr.FromInt32(443), Scheme: v1.URISchemeHTTPS, Host: "127.0.0.1"}, "https://127.0.0.1:443"},
	} {
		u, err := httpGetURL(&tc.h, c, "10.244.0.9")
		if err != nil || u.String() != tc.want {
			t.Errorf("httpGetURL(%+v) = %v, %v; want %s", tc.h, u, err, tc.want)
		}
	}
	if _, err := resolvePort(intstr.FromString("metrics"), c); err == nil {
		t.Error("unknown port name accepted")
	}
}

func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	term, logf := filepath.Join(dir, "term"), filepath.Join(dir, "log")
	big := strings.Repeat("x", 5000) + "END"
	if err := os.WriteFile(term, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := terminationMessage(term, logf, "File", 0); len(got) != maxTermMessage || !strings.HasSuffix(got, "END") {
		t.Errorf("message of %d bytes ending %q, want the last %d bytes", len(got), got[len(got)-3:], maxTermMessage)
	}
	if err := os.WriteFile(term, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logf, []byte("starting\npanic: boom\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := terminationMessage(term, logf, "FallbackToLogsOnError", 2); got != "starting\npanic: boom" {
		t.Errorf("fallback message %q", got)
	}
	if got := terminationMessage(term, logf, "FallbackToLogsOnError", 0); got != "" {
		t.Errorf("fallback used for a clean exit: %q", got)
	}
	if got := terminationMessage(term, logf, "File", 2); got != "" {
		t.Errorf("policy File used logs: %q", got)
	}
}

func TestCheckTargetStaysOnMachine(t *testing.T) {
	cidr := netip.MustParsePrefix("10.244.0.0/16")
	for host, ok := range map[string]bool{
		"": true, "localhost": true, "127.0.0.1": true, "::1": true, "10.244.3.4": true,
		"10.245.0.1": false, "192.0.2.1": false, "8.8.8.8": false, "example.com": false,
	} {
		if err := checkTarget(host, cidr); (err == nil) != ok {
			t.Errorf("checkTarget(%q) = %v, want allowed=%v", host, err, ok)
		}
	}
}
