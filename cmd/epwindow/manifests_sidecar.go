package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure"
)

// The sidecar flags of `epwindow manifests` (--port is the sidecar's own,
// in sidecar.go).
const (
	flagSidecar       = "sidecar"
	flagSidecarFormat = "sidecar-format"
)

// The --sidecar-format values.
const (
	sidecarFormatPatch     = "patch"
	sidecarFormatComponent = "component"
)

func sidecarManifestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: flagSidecar, Usage: "print the epwindow sidecar for the Deployment --name instead, to keep in a staging overlay: a strategic-merge patch (kubectl patch --patch-file) or a kustomize Component", Category: "Sidecar"},
		&cli.StringFlag{Name: flagSidecarFormat, Value: sidecarFormatPatch, Usage: "with --sidecar: " + sidecarFormatPatch + " (kubectl patch deployment NAME --type strategic --patch-file FILE) or " + sidecarFormatComponent + " (a kustomize Component, listed under components:)", Category: "Sidecar"},
		&cli.IntSliceFlag{Name: flagPort, Usage: "with --sidecar: the app's TCP port the sidecar watches, its containerPort (repeatable; required: manifests does not read the Deployment)", Category: "Sidecar"},
	}
}

// checkSidecarFlags refuses the sidecar's flags without --sidecar.
func checkSidecarFlags(c *cli.Context) error {
	for _, f := range []string{flagPort, flagSidecarFormat} {
		if c.IsSet(f) {
			return cli.Exit(fmt.Sprintf("--%s needs --%s", f, flagSidecar), exitUsage)
		}
	}
	return nil
}

// printSidecar prints the sidecar for the Deployment --name: the patch that
// measure --target applies, without its run annotation (the Deployment's
// own sidecar), or the same as a kustomize Component.
func printSidecar(c *cli.Context) error {
	fail := func(format string, a ...any) error {
		return cli.Exit("epwindow manifests --sidecar: "+fmt.Sprintf(format, a...), exitUsage)
	}
	if c.NArg() > 0 {
		return fail("takes no arguments, got %q", c.Args().Slice())
	}
	for _, f := range []string{flagRBAC, flagSchedule} {
		if c.IsSet(f) {
			return fail("--%s prints something else: give one of --%s and --%s", f, f, flagSidecar)
		}
	}
	for _, f := range workloadFlags() {
		if n := f.Names()[0]; n != measure.FlagImage && c.IsSet(n) {
			return fail("--%s shapes the probe workload, not the sidecar (it takes --name, --port and --image)", n)
		}
	}
	name := c.String(flagName)
	if !c.IsSet(flagName) {
		return fail("--%s is required: the Deployment the sidecar goes in", flagName)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fail("--%s %q: not a Deployment name: %s", flagName, name, strings.Join(errs, "; "))
	}
	if len(c.IntSlice(flagPort)) == 0 {
		return fail("--%s is required: the app's port(s), as in its containerPort (repeat it for several); manifests does not read the Deployment", flagPort)
	}
	o := deploy.SidecarOptions{Image: c.String(measure.FlagImage)}
	for _, p := range c.IntSlice(flagPort) {
		if p < 1 || p > 65535 {
			return fail("--%s %d: must be 1-65535", flagPort, p)
		}
		o.Ports = append(o.Ports, int32(p))
	}
	var out []byte
	switch format := c.String(flagSidecarFormat); format {
	case sidecarFormatComponent:
		comp, err := deploy.SidecarComponent(name, corev1.PodSpec{}, o)
		if err != nil {
			return fail("%v", err)
		}
		out = comp
	case sidecarFormatPatch:
		patch, err := deploy.SidecarPatch(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}}, o)
		if err != nil {
			return fail("%v", err)
		}
		if out, err = yaml.JSONToYAML(patch); err != nil {
			return err
		}
		header := fmt.Sprintf("# epwindow's sidecar for Deployment %[1]s (docs/sidecar.md). Save as sidecar.yaml, then:\n"+
			"#   kubectl patch deployment %[1]s --type strategic --patch-file sidecar.yaml\n"+
			"# and to take it out again:\n"+
			"#   kubectl patch deployment %[1]s --type strategic -p '%[2]s'\n", name, deploy.SidecarRemovePatch())
		out = append([]byte(header), out...)
	default:
		return fail("--%s %q: want %s", flagSidecarFormat, format, strings.Join([]string{sidecarFormatPatch, sidecarFormatComponent}, " or "))
	}
	_, err := c.App.Writer.Write(out)
	return err
}
