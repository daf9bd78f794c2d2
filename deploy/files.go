package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// files are the manifests as committed under deploy/: the same files that
// `kustomize build deploy/overlays/<controller>` reads.
//
//go:embed base overlays rbac httproute schedule sidecar
var files embed.FS

// Files returns the embedded manifests: base/, overlays/<name>/,
// httproute/ and rbac/.
func Files() fs.FS { return files }

// BaseOverlay names the base itself, used when no overlay fits the class.
const BaseOverlay = "base"

// HTTPRouteOverlay is the kustomization of --route httproute: the base with
// an HTTPRoute instead of the Ingress. Not one of Overlays(), which are
// picked by ingress class.
const HTTPRouteOverlay = "httproute"

// Overlays lists the embedded overlays (ingress controllers), sorted.
func Overlays() []string {
	entries, err := files.ReadDir("overlays")
	if err != nil {
		// The directory is embedded at build time; its absence is a build bug.
		panic(fmt.Sprintf("embedded overlays: %v", err))
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// overlayDir returns the kustomization directory of an overlay name.
func overlayDir(name string) (string, error) {
	if name == BaseOverlay {
		return "base", nil
	}
	for _, o := range Overlays() {
		if o == name {
			return path.Join("overlays", name), nil
		}
	}
	return "", fmt.Errorf("unknown overlay %q (--overlay): one of %s, %v", name, BaseOverlay, Overlays())
}

// kustomize builds dir (relative to deploy/) from the embedded files, in an
// in-memory filesystem: no disk, no network, no plugins.
func kustomize(dir string) (resmap.ResMap, error) {
	mem, err := embeddedFS()
	if err != nil {
		return nil, err
	}
	return build(mem, dir)
}

// embeddedFS copies the embedded manifests into an in-memory filesystem,
// at its root.
func embeddedFS() (filesys.FileSystem, error) {
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return mem.MkdirAll("/" + p)
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile("/"+p, data)
	})
	if err != nil {
		return nil, fmt.Errorf("copy embedded manifests: %w", err)
	}
	return mem, nil
}

func build(mem filesys.FileSystem, dir string) (resmap.ResMap, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(mem, "/"+dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build deploy/%s: %w", dir, err)
	}
	return m, nil
}

// KustomizeIn is Kustomize with every namespaced object in namespace ns:
// dir built as the resource of a kustomization that sets `namespace: ns`,
// e.g. KustomizeIn("rbac/target", "team-a").
func KustomizeIn(dir, ns string) ([]byte, error) {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	mem, err := embeddedFS()
	if err != nil {
		return nil, err
	}
	wrap := fmt.Sprintf("namespace: %q\nresources: [%q]\n", ns, "../"+dir)
	if err := mem.WriteFile("/_namespace/kustomization.yaml", []byte(wrap)); err != nil {
		return nil, err
	}
	m, err := build(mem, "_namespace")
	if err != nil {
		return nil, fmt.Errorf("deploy/%s in namespace %q: %w", dir, ns, err)
	}
	return m.AsYaml()
}

// Kustomize returns `kustomize build deploy/<dir>` of the embedded files as
// YAML, e.g. Kustomize("rbac/cluster") for the ClusterRole to apply.
func Kustomize(dir string) ([]byte, error) {
	m, err := kustomize(dir)
	if err != nil {
		return nil, err
	}
	return m.AsYaml()
}
