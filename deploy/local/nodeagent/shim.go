package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ShimArg is argv[1] of a process started as a container shim. The binary
// embedding the node agent must, first thing in main, call
// ShimMain(os.Args[2:]) when os.Args[1] == ShimArg.
const ShimArg = "__epwindow-nodeagent-shim"

// shimSpec is what the agent passes to the shim (as JSON in argv[2]).
type shimSpec struct {
	NetNS    string   `json:"netns"`
	Hostname string   `json:"hostname"`
	Path     string   `json:"path"`
	Args     []string `json:"args"`
	Env      []string `json:"env"`
	Dir      string   `json:"dir,omitempty"`
	// UID and GID are applied when SetUser is true (runAsUser given).
	SetUser bool  `json:"setUser,omitempty"`
	UID     int   `json:"uid,omitempty"`
	GID     int   `json:"gid,omitempty"`
	Groups  []int `json:"groups,omitempty"`
	// TermLog is the host file bind-mounted at TermPath.
	TermLog      string `json:"termLog,omitempty"`
	TermPath     string `json:"termPath,omitempty"`
	ReadOnlyRoot bool   `json:"readOnlyRoot,omitempty"`
	// ResolvConf, when set, is the host file bind-mounted over
	// /etc/resolv.conf (the pod's DNS, as `ip netns exec` does for
	// /etc/netns/NAME/resolv.conf).
	ResolvConf string `json:"resolvConf,omitempty"`
	// Mounts are the container's volumes (see mountVolumes).
	Mounts []shimMount `json:"mounts,omitempty"`
}

// shimCloneFlags are the namespaces the agent creates for the shim when it
// starts it: a private mount table (for /dev and the termination-message
// file) and its own hostname.
const shimCloneFlags = syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS

// ShimMain turns the current process into a container: it is started by
// the agent in fresh mount and UTS namespaces, and here it makes its mounts
// private, mounts a tmpfs /dev with the basic devices and the termination
// message file, optionally makes / read-only, enters the pod's network
// namespace, drops to the container's user and execs the container's
// command. It does not return; on failure it prints the reason to stderr
// (the container log) and exits 128, the code runtimes use for a container
// that could not start.
func ShimMain(args []string) {
	err := shim(args)
	fmt.Fprintf(os.Stderr, "epwindow node agent: start container: %v\n", err)
	os.Exit(128)
}

func shim(args []string) error {
	// Namespace changes below apply to this thread, which must be the one
	// that calls exec.
	runtime.LockOSThread()
	if len(args) != 1 {
		return fmt.Errorf("shim wants one argument (the spec), got %d", len(args))
	}
	var s shimSpec
	if err := json.Unmarshal([]byte(args[0]), &s); err != nil {
		return fmt.Errorf("decode spec: %w", err)
	}
	// Everything below changes mounts and the hostname: only ever in the
	// namespaces the agent made for this process, never in its parent's
	// (as when someone runs the shim by hand).
	for _, ns := range []string{"mnt", "uts"} {
		if err := ownNamespace(ns); err != nil {
			return err
		}
	}
	binary := s.Path
	if err := pinSources(&s); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("set hostname: %w", err)
		}
	}
	// Opened before the volumes are mounted: a volume under /run may
	// overlay the directory that holds the namespace's file.
	fd, err := unix.Open(s.NetNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open pod network namespace: %w", err)
	}
	if err := setupDev(); err != nil {
		return err
	}
	// Volumes first: one whose mount point needs an overlay would hide
	// the files bound below it.
	overlays, err := mountVolumes(s.Mounts)
	if err != nil {
		return err
	}
	if s.TermLog != "" && s.TermPath != "" {
		if err := bindTermLog(s.TermLog, s.TermPath); err != nil {
			return err
		}
	}
	if s.ResolvConf != "" {
		if err := unix.Mount(s.ResolvConf, hostResolvConf, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the pod's resolv.conf at %s: %w", hostResolvConf, err)
		}
	}
	if s.ReadOnlyRoot {
		for _, p := range append([]string{"/"}, overlays...) {
			if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("remount %s read-only: %w", p, err)
			}
		}
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter pod network namespace: %w", err)
	}
	unix.Close(fd)
	dir := s.Dir
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("working dir: %w", err)
	}
	if s.SetUser {
		groups := s.Groups
		if groups == nil {
			groups = []int{}
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fmt.Errorf("set groups: %w", err)
		}
		if err := syscall.Setgid(s.GID); err != nil {
			return fmt.Errorf("set gid %d: %w", s.GID, err)
		}
		if err := syscall.Setuid(s.UID); err != nil {
			return fmt.Errorf("set uid %d: %w", s.UID, err)
		}
	}
	// Changing credentials cleared the parent-death signal: set it again
	// so that a crashed agent does not leave containers running.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("set parent death signal: %w", err)
	}
	if os.Getppid() == 1 {
		return errors.New("the node agent exited while the container was starting")
	}
	err = syscall.Exec(s.Path, s.Args, s.Env)
	return fmt.Errorf("exec %s as uid %d: %w", binary, os.Getuid(), err)
}

// pinSources opens the container's binary and every host file the shim
// binds into the container (volumes, the termination-message file,
// resolv.conf) before anything is
// mounted, and names each by its descriptor (/proc/self/fd/N, which mount
// follows): a volume mounted at /tmp, or an overlay made for a mount point,
// may cover the agent's state directory that holds them. The descriptors
// close at exec.
func pinSources(s *shimSpec) error {
	pin := func(p *string) error {
		if *p == "" {
			return nil
		}
		fd, err := unix.Open(*p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", *p, err)
		}
		*p = fmt.Sprintf("/proc/self/fd/%d", fd)
		return nil
	}
	if err := pin(&s.Path); err != nil {
		return err
	}
	if err := pin(&s.TermLog); err != nil {
		return err
	}
	if err := pin(&s.ResolvConf); err != nil {
		return err
	}
	for i := range s.Mounts {
		if err := pin(&s.Mounts[i].Source); err != nil {
			return fmt.Errorf("volume for %s: %w", s.Mounts[i].Target, err)
		}
	}
	return nil
}

// ownNamespace fails unless this process's namespace of kind ns (mnt,
// uts) differs from its parent's.
func ownNamespace(ns string) error {
	var self, parent unix.Stat_t
	if err := unix.Stat("/proc/self/ns/"+ns, &self); err != nil {
		return fmt.Errorf("own %s namespace: %w", ns, err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", os.Getppid(), ns), &parent); err != nil {
		return fmt.Errorf("parent's %s namespace: %w", ns, err)
	}
	if self.Dev == parent.Dev && self.Ino == parent.Ino {
		return fmt.Errorf("refusing to run in the parent's %s namespace: the shim is started only by the node agent", ns)
	}
	return nil
}

// devNodes are the device nodes of a container's /dev (as runc creates them).
var devNodes = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// setupDev mounts a tmpfs over /dev in the container's mount namespace,
// so that files made there (the termination-message file) never reach the
// host's /dev.
func setupDev() error {
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("mount tmpfs on /dev: %w", err)
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	for _, d := range devNodes {
		if err := unix.Mknod("/dev/"+d.name, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("create /dev/%s: %w", d.name, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, "/dev/"+name); err != nil {
			return fmt.Errorf("create /dev/%s: %w", name, err)
		}
	}
	if err := os.Mkdir("/dev/shm", 0o1777); err != nil {
		return fmt.Errorf("create /dev/shm: %w", err)
	}
	if err := unix.Mount("shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	return nil
}

// bindTermLog bind-mounts the host file hostPath at path. Under /dev the
// mount point is made in the tmpfs; elsewhere it must already exist (the
// agent never creates files in the host's filesystem for a container).
func bindTermLog(hostPath, path string) error {
	path = filepath.Clean(path)
	if strings.HasPrefix(path, "/dev/") {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("termination message path %s: %w", path, err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("termination message path %s: %w", path, err)
		}
		f.Close()
	} else if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("termination message path %s must be under /dev/ or exist on this machine: %w", path, err)
	}
	if err := unix.Mount(hostPath, path, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind termination message file at %s: %w", path, err)
	}
	return nil
}
