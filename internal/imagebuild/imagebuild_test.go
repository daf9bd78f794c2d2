package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// staticBinary compiles a tiny static linux program for the test.
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "epwindow")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GO111MODULE=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func TestArchive(t *testing.T) {
	bin := staticBinary(t)
	img, err := Build(Options{Binary: bin, Labels: map[string]string{"org.opencontainers.image.title": "epwindow"}})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "epwindow-image.tar")
	tags := []string{"epwindow:latest", "registry.example.com/epwindow:v1"}
	if err := WriteArchive(archive, img, tags...); err != nil {
		t.Fatal(err)
	}

	// docker load reads manifest.json: one entry, every tag in RepoTags.
	manifest := readTarFile(t, archive, "manifest.json")
	var m tarball.Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].Layers) != 1 {
		t.Fatalf("manifest.json = %+v, want one image with one layer", m)
	}
	got := append([]string(nil), m[0].RepoTags...)
	sort.Strings(got)
	if want := []string{"epwindow:latest", "registry.example.com/epwindow:v1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RepoTags = %v, want %v", got, want)
	}

	// Read it back as an image.
	tag, err := name.NewTag("epwindow:latest")
	if err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user = %q, want 65532:65532", cfg.Config.User)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"epwindow"}) {
		t.Errorf("entrypoint = %q, want [epwindow]", cfg.Config.Entrypoint)
	}
	if !reflect.DeepEqual(cfg.Config.Env, []string{"PATH=" + Path}) || !strings.Contains(Path, filepath.Dir(BinaryPath)) {
		t.Errorf("env = %q: PATH must hold %s", cfg.Config.Env, filepath.Dir(BinaryPath))
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform = %s/%s, want linux/%s (the binary's)", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	for _, h := range cfg.History {
		if !h.Created.Time.Equal(cfg.Created.Time) {
			t.Errorf("history entry created %s, want the image's %s", h.Created, cfg.Created)
		}
	}
	if cfg.Config.Labels["org.opencontainers.image.title"] != "epwindow" {
		t.Errorf("labels = %v", cfg.Config.Labels)
	}
	layers, err := back.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name != "usr/local/bin/epwindow" {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want) {
			t.Error("layer's binary differs from the input")
		}
		if h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("binary mode %o owner %d:%d, want 755 root:root", h.Mode, h.Uid, h.Gid)
		}
	}
	if wantNames := []string{"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/epwindow"}; !reflect.DeepEqual(names, wantNames) {
		t.Errorf("layer holds %q, want %q", names, wantNames)
	}

	// The same binary gives the same image: reproducible digests.
	again, err := Build(Options{Binary: bin, Labels: map[string]string{"org.opencontainers.image.title": "epwindow"}})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of one binary: %s != %s", d1, d2)
	}
}

func TestRefusesUnrunnableBinaries(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(Options{Binary: notELF}); err == nil || !strings.Contains(err.Error(), "GOOS=linux") {
		t.Errorf("non-ELF: err = %v, want one naming GOOS=linux", err)
	}
	// /bin/sh is dynamically linked on Debian.
	if _, err := Build(Options{Binary: "/bin/sh"}); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("dynamic binary: err = %v, want one naming CGO_ENABLED=0", err)
	}
	if err := WriteArchive(filepath.Join(t.TempDir(), "x.tar"), nil); err == nil {
		t.Error("WriteArchive without tags succeeded")
	}
}

// readTarFile returns one file of a tar archive.
func readTarFile(t *testing.T, archive, file string) []byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s has no %s: %v", archive, file, err)
		}
		if h.Name == file {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
