package imagebuild

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image layout.
const (
	// BinaryPath is where the binary lives in the image; it is on PATH.
	BinaryPath = "/usr/local/bin/epwindow"
	// User is the non-root uid:gid the image runs as (distroless's
	// "nonroot"); the probe manifests set the same runAsUser.
	User = "65532:65532"
	// Path is the image's PATH, so the entrypoint "epwindow" resolves.
	Path = "/usr/local/bin:/usr/bin:/bin"
)

// Options describe one image.
type Options struct {
	// Binary is a statically linked linux executable (CGO_ENABLED=0).
	Binary string
	// OS and Arch name the platform; Arch "" means the binary's.
	OS, Arch string
	// Created stamps the config and every file; zero means the Unix epoch,
	// so that the same binary always gives the same image digest.
	Created time.Time
	// Labels are OCI image labels (org.opencontainers.image.*).
	Labels map[string]string
}

// Build returns the image for opts.
func Build(opts Options) (v1.Image, error) {
	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	arch, err := checkStatic(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opts.Binary, err)
	}
	if opts.Arch == "" {
		opts.Arch = arch
	}
	if opts.OS == "" {
		opts.OS = "linux"
	}
	created := opts.Created
	if created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}
	layerTar, err := layer(bin, created)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = opts.OS, opts.Arch
	cfg.Created = v1.Time{Time: created}
	cfg.Config.User = User
	cfg.Config.Entrypoint = []string{path.Base(BinaryPath)}
	cfg.Config.Env = []string{"PATH=" + Path}
	cfg.Config.Labels = opts.Labels
	for i := range cfg.History {
		cfg.History[i].Created = v1.Time{Time: created}
		cfg.History[i].CreatedBy = "imagebuild: " + BinaryPath
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return img, nil
}

// WriteArchive writes img to file under every tag (e.g. "epwindow:latest").
func WriteArchive(file string, img v1.Image, tags ...string) error {
	if len(tags) == 0 {
		return errors.New("no tag: docker load needs at least one (-tag)")
	}
	refs := map[name.Reference]v1.Image{}
	for _, t := range tags {
		tag, err := name.NewTag(t)
		if err != nil {
			return fmt.Errorf("tag %q: %w", t, err)
		}
		refs[tag] = img
	}
	if err := tarball.MultiRefWriteToFile(file, refs); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// layer is the tar of the image's only layer: the directories down to the
// binary and the binary itself, owned by root, executable by all.
func layer(bin []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := path.Dir(BinaryPath)[1:] // usr/local/bin
	var dirs []string
	for d := dir; d != "."; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime,
		}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: BinaryPath[1:], Mode: 0o755, Size: int64(len(bin)), ModTime: mtime,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkStatic returns the GOARCH name of a static linux ELF executable, or
// why it cannot run on an empty base (no dynamic loader, no libc there).
func checkStatic(bin []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable (build with GOOS=linux): %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("dynamically linked: build with CGO_ENABLED=0, the image has no libc")
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_386:
		return "386", nil
	case elf.EM_ARM:
		return "arm", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	}
	return "", fmt.Errorf("unknown ELF machine %s: pass the architecture", f.Machine)
}
