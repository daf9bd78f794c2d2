package deploy

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// krewPlugin holds the fields krew requires of a v1alpha2 Plugin manifest
// (krew's pkg/index/validation), and the ones we promise to fill.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// krewRelease are values a release fills the template's placeholders with.
var krewRelease = map[string]string{
	"VERSION":            "v1.2.3",
	"SHA256_LINUX_AMD64": strings.Repeat("a", 64), "SHA256_LINUX_ARM64": strings.Repeat("b", 64),
	"SHA256_DARWIN_AMD64": strings.Repeat("c", 64), "SHA256_DARWIN_ARM64": strings.Repeat("d", 64),
}

// The krew template, once its placeholders are filled, is a manifest krew
// accepts: the required fields, a platform for each of linux and darwin on
// amd64 and arm64 with its own archive, and caveats about RBAC.
func TestKrewManifest(t *testing.T) {
	tmpl, err := os.ReadFile("krew/epwindow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	filled := os.Expand(string(tmpl), func(name string) string {
		v, ok := krewRelease[name]
		if !ok {
			t.Errorf("placeholder ${%s} is not one a release fills", name)
		}
		return v
	})
	var p krewPlugin
	if err := yaml.UnmarshalStrict([]byte(filled), &p); err != nil {
		t.Fatalf("krew/epwindow.yaml: %v", err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "epwindow" {
		t.Errorf("apiVersion %q, kind %q, name %q", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(p.Spec.Version) {
		t.Errorf("spec.version %q is not vMAJOR.MINOR.PATCH", p.Spec.Version)
	}
	if p.Spec.ShortDescription == "" || len(p.Spec.ShortDescription) > 50 || p.Spec.Description == "" || p.Spec.Homepage == "" {
		t.Errorf("homepage %q, shortDescription %q (krew: at most 50 characters), description %q", p.Spec.Homepage, p.Spec.ShortDescription, p.Spec.Description)
	}
	if !strings.Contains(p.Spec.Caveats, "RBAC") && !strings.Contains(p.Spec.Caveats, "--rbac") {
		t.Errorf("caveats do not say which permissions it needs: %q", p.Spec.Caveats)
	}

	var platforms, uris []string
	for _, pl := range p.Spec.Platforms {
		osName, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		platforms = append(platforms, osName+"/"+arch)
		u, err := url.Parse(pl.URI)
		if err != nil || u.Scheme != "https" || !strings.Contains(pl.URI, osName+"-"+arch) || !strings.Contains(pl.URI, p.Spec.Version) {
			t.Errorf("%s/%s: uri %q is not the https archive of that platform and version", osName, arch, pl.URI)
		}
		uris = append(uris, pl.URI)
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(pl.SHA256) {
			t.Errorf("%s/%s: sha256 %q", osName, arch, pl.SHA256)
		}
		if pl.Bin != "epwindow" || len(pl.Files) == 0 || pl.Files[0].From != "epwindow" {
			t.Errorf("%s/%s: bin %q, files %+v; want the epwindow binary", osName, arch, pl.Bin, pl.Files)
		}
	}
	slices.Sort(platforms)
	if want := []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
	if slices.Sort(uris); len(slices.Compact(uris)) != len(p.Spec.Platforms) {
		t.Errorf("two platforms share an archive: %v", uris)
	}
}
