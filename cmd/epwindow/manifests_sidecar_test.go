package main

import (
	"encoding/json"
	"flag"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/sidecar"
)

// manifests --sidecar prints deploy.SidecarPatch for the Deployment --name
// as YAML, with no run annotation: the sidecar a team keeps.
func TestManifestsSidecarPatch(t *testing.T) {
	got, err := runApp(t, "manifests", "--sidecar", "--name", "web", "--port", "8080", "--port", "8443", "--image", "registry.example.com/epwindow:v1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "kubectl patch deployment web --type strategic --patch-file") {
		t.Errorf("the patch does not say how to apply it:\n%s", got)
	}
	o := deploy.SidecarOptions{Image: "registry.example.com/epwindow:v1", Ports: []int32{8080, 8443}}
	want, err := deploy.SidecarPatch(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, o)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON([]byte(got))
	if err != nil {
		t.Fatalf("not YAML: %v\n%s", err, got)
	}
	var g, w any
	if err := json.Unmarshal(js, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("manifests --sidecar printed\n%s\nwant SidecarPatch's\n%s", js, want)
	}
	if strings.Contains(got, deploy.SidecarRunAnnotation+":") {
		t.Errorf("the kept patch sets %s, which makes measure --target refuse", deploy.SidecarRunAnnotation)
	}
}

func TestManifestsSidecarComponent(t *testing.T) {
	got, err := runApp(t, "manifests", "--sidecar", "--sidecar-format", "component", "--name", "web", "--port", "8080")
	if err != nil {
		t.Fatal(err)
	}
	want, err := deploy.SidecarComponent("web", corev1.PodSpec{}, deploy.SidecarOptions{Image: deploy.DefaultImage, Ports: []int32{8080}})
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("--sidecar-format component printed\n%s\nwant\n%s", got, want)
	}
}

// The args deploy gives the sidecar container are what `epwindow sidecar`
// takes, and its defaults are the sidecar's.
func TestSidecarContainerArgsParse(t *testing.T) {
	for _, o := range []deploy.SidecarOptions{
		{Ports: []int32{8080}},
		{Ports: []int32{8080, 8443}, Listen: 9191, Interval: 50_000_000},
	} {
		c, err := deploy.SidecarContainer(corev1.PodSpec{}, o)
		if err != nil {
			t.Fatal(err)
		}
		cmd := sidecarCommand()
		set := flag.NewFlagSet("sidecar", flag.ContinueOnError)
		for _, f := range cmd.Flags {
			if err := f.Apply(set); err != nil {
				t.Fatal(err)
			}
		}
		if err := set.Parse(c.Args); err != nil {
			t.Fatalf("epwindow sidecar %q: %v", c.Args, err)
		}
		if err := set.Set(flagPodName, "web-1"); err != nil {
			t.Fatal(err)
		}
		cfg, err := sidecarConfig(cli.NewContext(newApp("epwindow"), set, nil))
		if err != nil {
			t.Fatalf("epwindow sidecar %q: %v", c.Args, err)
		}
		if o.Listen == 0 && cfg.Listen != sidecar.DefaultListen {
			t.Errorf("--listen %q, want the sidecar's default %q (deploy.DefaultSidecarPort)", cfg.Listen, sidecar.DefaultListen)
		}
		if cfg.TerminationLog != probe.DefaultTerminationLog || c.TerminationMessagePath != cfg.TerminationLog {
			t.Errorf("termination log %q, message path %q; want both %q", cfg.TerminationLog, c.TerminationMessagePath, probe.DefaultTerminationLog)
		}
		if len(cfg.Ports) != len(o.Ports) {
			t.Errorf("ports %v, want %v", cfg.Ports, o.Ports)
		}
	}
}

func TestManifestsSidecarBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--sidecar", "--name", "web"}, "--port"},
		{[]string{"--sidecar", "--port", "8080"}, "--name"},
		{[]string{"--sidecar", "--name", "web", "--port", "0"}, "--port 0"},
		{[]string{"--sidecar", "--name", "web", "--port", "9091"}, "9091"},
		{[]string{"--sidecar", "--name", "web", "--port", "8080", "--sidecar-format", "helm"}, "--sidecar-format"},
		{[]string{"--sidecar", "--name", "web", "--port", "8080", "--rbac", "target"}, "--rbac"},
		{[]string{"--sidecar", "--name", "web", "--port", "8080", "--hold", "5s"}, "--hold"},
		{[]string{"--sidecar", "--name", "Web", "--port", "8080"}, "--name"},
		{[]string{"--port", "8080"}, "--sidecar"},
		{[]string{"--sidecar-format", "component"}, "--sidecar"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) { wantBadInput(t, tt.args, tt.want) })
	}
}
