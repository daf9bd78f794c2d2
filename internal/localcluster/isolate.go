package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// isolatedEnv marks the copy of a test binary that Isolate runs in
// namespaces of its own.
const isolatedEnv = "EPWINDOW_LOCAL_ISOLATED"

// isolated is set in that copy once its namespaces are ready: its clusters
// share nothing with another package's, so Start takes no machine lock.
var isolated bool

// Isolate gives a test binary a network namespace and a mount namespace of
// its own, so that its local clusters run beside other packages' instead of
// taking turns: call it first in TestMain (Main does). It runs the binary
// again, with the same arguments and standard streams, in a new network
// namespace and a private mount namespace, forwards SIGINT, SIGTERM and
// SIGQUIT (go test's timeout) to it, and exits with its status; in that
// copy it returns, once loopback is up, /run is a private tmpfs and /sys
// shows the copy's network devices.
//
// What a cluster shares with others on a machine is all in those two: the
// root network namespace's bridge, routes, pod and Service ranges
// (10.244.0.0/16, 10.96.0.0/12), kube-proxy's nftables or iptables tables,
// the ports on 127.0.0.1, and under /run the pods' named network
// namespaces (/run/netns), up's machine lock and kube-proxy's marker. The
// test, the cluster, the data planes, the pods and every epwindow a test
// runs are the copy's children, so they all share its loopback. When the
// copy ends, whatever it left in either namespace goes with it.
//
// A developer reaches a running test's cluster with
// `nsenter -t PID -n -m` (PID: the copy's, or epwindow-local's); its
// kubeconfig and logs are in its directory, on the machine's filesystem.
func Isolate() {
	if os.Getenv(isolatedEnv) == "1" {
		if err := enterIsolated(); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: prepare the test's own namespaces:", err)
			os.Exit(1)
		}
		isolated = true
		return
	}
	os.Exit(runIsolated())
}

// runIsolated runs this binary again in new namespaces and returns its exit
// status.
func runIsolated() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		return 1
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), isolatedEnv+"=1")
	// With CLONE_NEWNS in Unshareflags, os/exec also remounts / recursively
	// private in the child (syscall/exec_linux.go), so its mounts stay its
	// own. Pdeathsig is tied to the thread that starts the child: this
	// goroutine keeps it until the process exits.
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:   syscall.CLONE_NEWNET,
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGTERM,
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: run the test binary in a network namespace of its own (the local cluster's tests need root): %v\n", err)
		return 1
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, "localcluster: the test binary in its own namespaces:", err)
		return 1
	}
}

// enterIsolated prepares the copy's namespaces: a private /run (the pods'
// named network namespaces, up's lock and kube-proxy's marker live there,
// see Isolate), a sysfs of its network namespace and loopback up.
func enterIsolated() error {
	if err := syscall.Mount("tmpfs", "/run", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mount a private /run: %w", err)
	}
	for _, d := range []string{"/run/netns", "/run/lock"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// sysfs shows the network devices of the namespace that mounted it, not
	// of the reader's (fs/sysfs/mount.c takes the mounter's net namespace),
	// and the node agent reads /sys/class/net for its bridge and veths: a
	// sysfs mounted here shows this namespace's, as `ip netns exec` does.
	if err := syscall.Mount("sysfs", "/sys", "sysfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount this namespace's sysfs: %w", err)
	}
	return loopbackUp()
}

// loopbackUp sets IFF_UP on lo, which a new network namespace has down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// IsolatedMain is the TestMain of a package whose tests start their own
// clusters with Start: Isolate, then the tests.
func IsolatedMain(m *testing.M) {
	Isolate()
	os.Exit(m.Run())
}
