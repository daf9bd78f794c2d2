package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options choose the cluster's shape; the zero value is 2 nodes, no batch
// period, Skipper polling every 3 s, in a fresh temporary directory.
type Options struct {
	// Nodes is the node count (0 = 2).
	Nodes int
	// BatchPeriod is the EndpointSlice controller's
	// --endpointslice-updates-batch-period.
	BatchPeriod time.Duration
	// IngressPoll is Skipper's poll interval (0 = 3s).
	IngressPoll time.Duration
	// Dir holds the cluster's kubeconfigs and logs; empty = a new
	// temporary directory, removed by Stop unless the cluster failed.
	Dir string
	// Timeout bounds the wait for READY (0 = 2 minutes).
	Timeout time.Duration
}

// Cluster is a running local cluster.
type Cluster struct {
	// Dir is the cluster's directory (logs: DIR/*.log).
	Dir string
	// Kubeconfig is the admin kubeconfig's path.
	Kubeconfig string
	// RestrictedKubeconfig is a kubeconfig for a user with no RBAC bindings.
	RestrictedKubeconfig string
	// Config is the admin client configuration, loaded from Kubeconfig.
	Config *rest.Config
	// IngressURL is Skipper's proxy listener, http://127.0.0.1:PORT.
	IngressURL string
	// RoutesURL is Skipper's route table, http://127.0.0.1:PORT/routes.
	RoutesURL string
	// StartupTime is from starting the binary to its READY line.
	StartupTime time.Duration

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	tmpDir  bool
	lock    *os.File
}

// LockFile serialises local clusters on this machine: they share the pod
// network (10.244.0.0/16, one bridge), so test packages that run in parallel
// take turns. Start holds it until Stop.
const LockFile = "/run/epwindow-local-tests.lock"

// acquireLock blocks until this process holds LockFile or ctx ends.
func acquireLock(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(LockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s (the local cluster needs root): %w", LockFile, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", LockFile, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another test package's local cluster to stop (%s): %w", LockFile, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Binary returns the path of bin/epwindow-local in the repository that
// holds the working directory, or an error that says how to build it.
func Binary() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "bin", "epwindow-local")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s missing: run make cluster", bin)
	}
	return bin, nil
}

// repoRoot walks up from the working directory to the directory whose
// go.mod declares the main module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/epwindow/epwindow\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod of github.com/epwindow/epwindow) not found above the working directory")
		}
		dir = parent
	}
}

// Start runs `bin/epwindow-local up` and waits for its READY line. The
// cluster needs root (network namespaces). Only one local cluster runs at a
// time: Start first waits (bounded by ctx) for another package's cluster to
// stop. On failure it returns the tail of the cluster's log in the error.
func Start(ctx context.Context, o Options) (_ *Cluster, retErr error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	lock, err := acquireLock(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			lock.Close()
		}
	}()
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.IngressPoll == 0 {
		o.IngressPoll = 3 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	c := &Cluster{Dir: o.Dir, done: make(chan struct{}), lock: lock}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "epwindow-local-"); err != nil {
			return nil, err
		}
		c.tmpDir = true
	}
	args := []string{"up",
		"--dir", c.Dir,
		"--nodes", strconv.Itoa(o.Nodes),
		"--batch-period", o.BatchPeriod.String(),
		"--ingress-poll", o.IngressPoll.String(),
	}
	c.cmd = exec.Command(bin, args...)
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(filepath.Join(c.Dir, "up.stderr"))
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	c.cmd.Stderr = stderr
	// Own process group: a ^C in the test's terminal reaches the test
	// binary, whose Stop then tears the cluster down in order.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	began := time.Now()
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.done)
	}()

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "READY ") {
				ready <- line
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	select {
	case line := <-ready:
		c.StartupTime = time.Since(began)
		if err := c.parseReady(line); err != nil {
			c.Stop()
			return nil, err
		}
	case <-c.done:
		return nil, fmt.Errorf("epwindow-local up exited before READY: %v\n%s", c.waitErr, c.logTail())
	case <-timer.C:
		c.Stop()
		return nil, fmt.Errorf("epwindow-local up not READY after %s\n%s", o.Timeout, c.logTail())
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	}
	c.RestrictedKubeconfig = filepath.Join(filepath.Dir(c.Kubeconfig), "kubeconfig-restricted")
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		c.Stop()
		return nil, fmt.Errorf("load %s: %w", c.Kubeconfig, err)
	}
	return c, nil
}

// parseReady reads "READY kubeconfig=P ingress=U routes=U".
func (c *Cluster) parseReady(line string) error {
	for _, f := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "kubeconfig":
			c.Kubeconfig = v
		case "ingress":
			c.IngressURL = v
		case "routes":
			c.RoutesURL = v
		}
	}
	if c.Kubeconfig == "" || c.IngressURL == "" || c.RoutesURL == "" {
		return fmt.Errorf("malformed READY line %q", line)
	}
	return nil
}

// logTail is the end of up's stderr and of its own log, for error messages.
func (c *Cluster) logTail() string {
	var b strings.Builder
	for _, name := range []string{"up.stderr", "epwindow-local.log"} {
		data, err := os.ReadFile(filepath.Join(c.Dir, name))
		if err != nil {
			continue
		}
		if len(data) > 4096 {
			data = data[len(data)-4096:]
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", filepath.Join(c.Dir, name), data)
	}
	return b.String()
}

// Done is closed when the cluster process has exited (for a test that
// wants to fail fast when the cluster dies under it).
func (c *Cluster) Done() <-chan struct{} { return c.done }

// Stop sends SIGTERM and waits for the teardown (SIGKILL after 90 s). It
// returns the process's exit error; a temporary Dir is removed after a
// clean exit.
func (c *Cluster) Stop() error {
	defer c.lock.Close() // releases LockFile
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(90 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
			return fmt.Errorf("epwindow-local did not stop within 90s after SIGTERM; killed (logs in %s)", c.Dir)
		}
	}
	if c.waitErr != nil {
		return fmt.Errorf("epwindow-local exited with %v (logs in %s)", c.waitErr, c.Dir)
	}
	if c.tmpDir {
		_ = os.RemoveAll(c.Dir)
	}
	return nil
}
