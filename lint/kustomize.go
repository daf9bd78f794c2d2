package lint

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// originAnnotation is where kustomize records the file a resource came
// from when the kustomization asks for it (buildMetadata: [originAnnotations]).
const originAnnotation = "config.kubernetes.io/origin"

// kustomizationNames are the file names kustomize looks for in a directory.
var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// IsKustomization reports whether dir holds a kustomization file.
func IsKustomization(dir string) bool {
	for _, n := range kustomizationNames {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return true
		}
	}
	return false
}

// originFS is the disk, except that the top kustomization also asks for
// origin annotations: each built resource then names its source file, so
// findings point into the files people edit rather than into build output.
type originFS struct {
	filesys.FileSystem
	top map[string]bool
}

func (f originFS) ReadFile(path string) ([]byte, error) {
	data, err := f.FileSystem.ReadFile(path)
	if err != nil || !f.top[filepath.Clean(path)] {
		return data, err
	}
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil || k == nil {
		return data, nil // kustomize reports the error itself
	}
	meta, _ := k["buildMetadata"].([]any)
	if !slices.Contains(meta, any(types.OriginAnnotations)) {
		k["buildMetadata"] = append(meta, types.OriginAnnotations)
	}
	return yaml.Marshal(k)
}

// Kustomize builds the kustomization in dir in memory, with the kustomize
// API the tool embeds (no kustomize binary, no plugins, no network), and
// returns its objects. Each object is located in the file it came from,
// where kustomize can tell (local resources); a field that only a patch
// sets is reported at its nearest ancestor in that file.
func Kustomize(dir string) ([]*Object, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	top := map[string]bool{}
	for _, n := range kustomizationNames {
		top[filepath.Join(abs, n)] = true
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(originFS{filesys.MakeFsOnDisk(), top}, abs)
	if err != nil {
		return nil, &InputError{File: dir, Err: fmt.Errorf("kustomize build: %w", err)}
	}
	sources := map[string][]*Object{} // file → its objects, parsed once
	load := func(src string) []*Object {
		if _, ok := sources[src]; !ok {
			if f, err := os.Open(src); err == nil {
				sources[src], _ = ParseYAML(src, f)
				f.Close()
			}
		}
		return sources[src]
	}
	// A patch that replaces metadata.annotations drops the origin too:
	// those objects are looked up, by their original name, in every
	// resource file the kustomizations list.
	var fallback []string
	listed := false
	var out []*Object
	for _, r := range m.Resources() {
		origin, _ := r.GetOrigin()
		if err := dropAnnotation(r, originAnnotation); err != nil {
			return nil, &InputError{File: dir, Err: err}
		}
		data, err := r.AsYAML()
		if err != nil {
			return nil, &InputError{File: dir, Err: fmt.Errorf("%s: %w", r.CurId(), err)}
		}
		objs, err := ParseYAML(dir, bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			o.Node = nil // lines of build output mean nothing to a reader
			if origin != nil && origin.Repo == "" && origin.Path != "" {
				src := filepath.Join(dir, origin.Path)
				if n := sourceNode(load(src), o); n != nil {
					o.File, o.Node = src, n
				}
			}
			if o.Node == nil {
				if !listed {
					fallback, listed = resourceFiles(dir, map[string]bool{}), true
				}
				orig := *o
				orig.Name = r.OrgId().Name
				for _, src := range fallback {
					if n := sourceNode(load(src), &orig); n != nil {
						o.File, o.Node = src, n
						break
					}
				}
			}
			out = append(out, o)
		}
	}
	return out, nil
}

func dropAnnotation(r *resource.Resource, key string) error {
	an := r.GetAnnotations()
	if _, ok := an[key]; !ok {
		return nil
	}
	delete(an, key)
	return r.SetAnnotations(an)
}

// sourceNode finds built object o among a file's objects: the same kind
// and name, else the one of its kind whose name the build extended
// (namePrefix, nameSuffix), else the only one of its kind.
func sourceNode(src []*Object, o *Object) *yaml.Node {
	var sameKind []*Object
	for _, s := range src {
		if s.Kind != o.Kind {
			continue
		}
		if s.Name == o.Name {
			return s.Node
		}
		sameKind = append(sameKind, s)
	}
	for _, s := range sameKind {
		if s.Name != "" && strings.Contains(o.Name, s.Name) {
			return s.Node
		}
	}
	if len(sameKind) == 1 {
		return sameKind[0].Node
	}
	return nil
}

// resourceFiles lists the files a kustomization's resources name, through
// its bases, depth first.
func resourceFiles(dir string, seen map[string]bool) []string {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	var k struct {
		Resources []string `yaml:"resources"`
		Bases     []string `yaml:"bases"`
	}
	for _, n := range kustomizationNames {
		if data, err := os.ReadFile(filepath.Join(dir, n)); err == nil {
			_ = yaml.Unmarshal(data, &k)
			break
		}
	}
	var out []string
	for _, r := range append(k.Resources, k.Bases...) {
		p := filepath.Join(dir, r)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			out = append(out, resourceFiles(p, seen)...)
		} else if err == nil {
			out = append(out, p)
		}
	}
	return out
}
