package testenv

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
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/epwindow/epwindow/deploy/local/internal/flock"
)

// Options are `epwindow-local up`'s flags.
type Options struct {
	Nodes       int
	BatchPeriod time.Duration
	IngressPoll time.Duration
	// Dir is --dir; empty = a new temporary directory.
	Dir string
}

// Cluster is a running `bin/epwindow-local up`.
type Cluster struct {
	Dir         string
	Kubeconfig  string
	IngressURL  string
	RoutesURL   string
	Config      *rest.Config
	Client      kubernetes.Interface
	StartupTime time.Duration // process start → READY line
	PID         int           // of epwindow-local

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	lock    *os.File
	ownDir  bool
}

// RepoRoot is the directory of the main module (github.com/epwindow/epwindow).
func RepoRoot() (string, error) {
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

// BinDir is the repository's bin/, where `make cluster` and `make build`
// put epwindow-local, skipper and epwindow.
func BinDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// RequireBinaries fails with how to build them if any is missing.
func RequireBinaries(names ...string) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(bin, n)); err != nil {
			how := "make cluster"
			if n == "epwindow" {
				how = "make build"
			}
			return fmt.Errorf("%s missing: run %s", filepath.Join(bin, n), how)
		}
	}
	return nil
}

// LockFile serialises local clusters across test packages (and with the
// main module's internal/localcluster, which uses the same file): clusters
// share the pod network, so parallel packages take turns.
const LockFile = "/run/epwindow-local-tests.lock"

func acquireLock(ctx context.Context) (*os.File, error) {
	f, err := flock.Acquire(ctx, LockFile, nil)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("waiting for another package's local cluster to stop (%s): %w", LockFile, err)
	}
	return f, err
}

// Start runs `bin/epwindow-local up` in a fresh temporary directory and
// waits for READY, after waiting for any other test package's cluster to
// stop.
func Start(ctx context.Context, o Options) (_ *Cluster, retErr error) {
	if err := RequireBinaries("epwindow-local", "skipper"); err != nil {
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
	bin, _ := BinDir()
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "epwindow-e2e-"); err != nil {
			return nil, err
		}
	}
	c := &Cluster{Dir: dir, done: make(chan struct{}), lock: lock, ownDir: o.Dir == ""}
	args := []string{"up", "--dir", dir, "--nodes", strconv.Itoa(o.Nodes),
		"--batch-period", o.BatchPeriod.String(), "--ingress-poll", o.IngressPoll.String()}
	c.cmd = exec.Command(filepath.Join(bin, "epwindow-local"), args...)
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(filepath.Join(dir, "up.stderr"))
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	c.cmd.Stderr = stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	began := time.Now()
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	c.PID = c.cmd.Process.Pid
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.done)
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY ") {
				ready <- sc.Text()
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		c.StartupTime = time.Since(began)
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
	case <-c.done:
		return nil, fmt.Errorf("epwindow-local up exited before READY: %v\n%s", c.waitErr, c.LogTail())
	case <-time.After(2 * time.Minute):
		c.Stop()
		return nil, fmt.Errorf("epwindow-local up not READY after 2m\n%s", c.LogTail())
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		c.Stop()
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// LogTail is the end of up's stderr and its own log.
func (c *Cluster) LogTail() string {
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

// Done is closed when epwindow-local has exited.
func (c *Cluster) Done() <-chan struct{} { return c.done }

// Kill SIGKILLs epwindow-local (a crash: no teardown runs) and waits for
// it. The machine lock stays held until Release.
func (c *Cluster) Kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// Main is a package's TestMain: it starts the cluster with o (waiting up
// to 10 minutes, another package's cluster included), hands it to set, runs
// the tests, stops and releases the cluster and exits.
func Main(m *testing.M, o Options, set func(*Cluster)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	c, err := Start(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the local cluster:", err)
		os.Exit(1)
	}
	set(c)
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the local cluster:", err)
		code = 1
	}
	c.Release()
	os.Exit(code)
}

// Release lets another package's cluster start; call it after Stop (and
// after any check of what the teardown left).
func (c *Cluster) Release() { c.lock.Close() }

// Stop sends SIGTERM and waits (SIGKILL after 90 s); it returns the exit
// error. A temporary directory (logs) is removed after a clean exit.
func (c *Cluster) Stop() error {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(90 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
			return fmt.Errorf("epwindow-local did not stop within 90s of SIGTERM (logs in %s)", c.Dir)
		}
	}
	if c.waitErr != nil {
		return fmt.Errorf("epwindow-local exited with %v (logs in %s)", c.waitErr, c.Dir)
	}
	if c.ownDir {
		return os.RemoveAll(c.Dir)
	}
	return nil
}

// ReadyAfter is up's own startup time, from taking the machine lock to
// READY, as it logs it in DIR/epwindow-local.log ("msg=ready after=…");
// unlike StartupTime it excludes waiting for another run to stop.
func (c *Cluster) ReadyAfter() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "epwindow-local.log"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, " msg=ready ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "after="); ok {
				return time.ParseDuration(v)
			}
		}
	}
	return 0, fmt.Errorf("no ready line in %s", filepath.Join(c.Dir, "epwindow-local.log"))
}
