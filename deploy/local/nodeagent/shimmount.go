package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// shimMount is one volume mount: the host path Source bound at Target in
// the container's mount namespace.
type shimMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// mountVolumes binds each volume at its target, parents before children
// (as container runtimes sort mounts by their destination's depth), and
// returns the overlays it made.
//
// A container's root here is the machine's own, so a mount point that does
// not exist on the machine (/var/run/secrets/kubernetes.io/serviceaccount,
// /var/lib/epwindow/history) cannot be created there without writing into
// the host's filesystem. Instead its deepest existing directory is covered,
// in this mount namespace only, by an overlay whose upper layer is a tmpfs:
// the container sees that directory's files unchanged, and the missing
// directories are made in the tmpfs, which goes away with the namespace.
// The machine's / is never overlaid.
func mountVolumes(ms []shimMount) ([]string, error) {
	ms = slices.Clone(ms)
	slices.SortStableFunc(ms, func(a, b shimMount) int {
		return strings.Count(filepath.Clean(a.Target), "/") - strings.Count(filepath.Clean(b.Target), "/")
	})
	var overlays []string
	for _, m := range ms {
		st, err := os.Stat(m.Source)
		if err != nil {
			return nil, fmt.Errorf("volume for %s: %w", m.Target, err)
		}
		target, err := mountPoint(m.Target, st.IsDir(), &overlays)
		if err != nil {
			return nil, err
		}
		if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return nil, fmt.Errorf("bind volume at %s: %w", m.Target, err)
		}
		if m.ReadOnly {
			if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
				return nil, fmt.Errorf("make %s read-only: %w", m.Target, err)
			}
		}
	}
	return overlays, nil
}

// mountPoint returns target with symbolic links resolved, creating it (a
// directory, or an empty file when dir is false) in an overlay when it is
// missing; overlays lists the directories already overlaid.
func mountPoint(target string, dir bool, overlays *[]string) (string, error) {
	target = filepath.Clean(target)
	if !filepath.IsAbs(target) {
		return "", fmt.Errorf("mount path %q is not absolute", target)
	}
	existing, rest := target, []string(nil)
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("mount path %s: %w", target, err)
		}
		rest = append([]string{filepath.Base(existing)}, rest...)
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", fmt.Errorf("mount path %s: %w", target, err)
	}
	full := filepath.Join(append([]string{real}, rest...)...)
	if len(rest) == 0 {
		st, err := os.Stat(full)
		if err != nil {
			return "", err
		}
		if st.IsDir() != dir {
			return "", fmt.Errorf("mount path %s: a volume that is a directory must be mounted on a directory, a file on a file", target)
		}
		return full, nil
	}
	if !slices.ContainsFunc(*overlays, func(o string) bool { return real == o || strings.HasPrefix(real, o+"/") }) {
		if real == "/" {
			return "", fmt.Errorf("mount path %s: no directory above it exists on this machine but /, which the node agent does not overlay", target)
		}
		if err := overlay(real); err != nil {
			return "", fmt.Errorf("mount path %s: %w", target, err)
		}
		*overlays = append(*overlays, real)
	}
	if dir {
		return full, os.MkdirAll(full, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return "", err
	}
	f, err := os.OpenFile(full, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	return full, f.Close()
}

// overlay covers dir with an overlay of dir itself under a fresh tmpfs
// (upper layer), owned and moded as dir is. The tmpfs is mounted in a
// scratch directory of the container's /dev and detached once the overlay
// holds it, so nothing of it stays visible.
func overlay(dir string) error {
	if strings.ContainsAny(dir, ",:\\") {
		return fmt.Errorf("cannot overlay %s: its name holds a character overlayfs options reserve", dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("/dev", ".overlay-")
	if err != nil {
		return err
	}
	defer os.Remove(scratch)
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("tmpfs for an overlay of %s: %w", dir, err)
	}
	defer unix.Unmount(scratch, unix.MNT_DETACH)
	upper, work := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if err := os.Chown(upper, int(sys.Uid), int(sys.Gid)); err != nil {
			return err
		}
	}
	if err := os.Chmod(upper, st.Mode()&(os.ModePerm|os.ModeSticky|os.ModeSetgid)); err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", dir, upper, work)
	if err := unix.Mount("overlay", dir, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay %s: %w", dir, err)
	}
	return nil
}
