// Package child runs the local cluster's data-plane processes (Skipper,
// Traefik, kube-proxy) as children that die with epwindow-local and stop
// in order.
package child

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is a started child.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd in its own process group, killed if this process dies
// (Pdeathsig), so a crash leaves no orphan holding ports or rules.
func Start(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error; valid after Done is closed.
func (p *Process) Err() error { return p.err }

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM, waits up to 10 s, then SIGKILLs; it returns once the
// process is gone.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// SystemPath is the PATH of every child: the system's binary folders,
// where Debian installs iptables, nft and ip (which kube-proxy and the
// node agent run), never the user's PATH.
const SystemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env is the whole environment of a child: PATH=SystemPath, then extra
// ("NAME=value"). Nothing is taken from this process's environment, which
// is the user's: Traefik's Kubernetes providers prefer $KUBECONFIG over the
// endpoint and token they are given (Traefik v3.6.12
// pkg/provider/kubernetes/{ingress,gateway,ingress-nginx}/…, "Creating
// cluster-external Provider client from KUBECONFIG"), and would watch the
// user's real cluster with the user's credentials; proxy variables would
// route the children's API calls elsewhere. A child needing more says so
// in extra (Skipper: SSL_CERT_FILE).
func Env(extra ...string) []string {
	return append([]string{"PATH=" + SystemPath}, extra...)
}

// Launch starts binary with args, its stdout and stderr appended to
// logFile, with the environment Env(env...) and nothing else.
func Launch(binary string, args []string, logFile string, env ...string) (*Process, error) {
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", logFile, err)
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = Env(env...)
	return Start(cmd)
}

// Retry calls start up to attempts times until it succeeds or ctx ends:
// a child on ports picked free just before may find one taken meanwhile
// and exit at once.
func Retry[T any](ctx context.Context, attempts int, start func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range attempts {
		if v, err = start(); err == nil || ctx.Err() != nil {
			break
		}
	}
	return v, err
}

// WaitReady polls ready every interval until it is true, failing if the
// process exits (naming log), ctx ends or timeout passes. On failure the
// process is stopped.
func (p *Process) WaitReady(ctx context.Context, name, log string, interval, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	err := func() error {
		for {
			if ready() {
				return nil
			}
			select {
			case <-p.Done():
				return fmt.Errorf("%s exited while starting (see %s): %v", name, log, p.Err())
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(interval):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready after %s (see %s)", name, timeout, log)
			}
		}
	}()
	if err != nil {
		p.Stop()
	}
	return err
}

// HTTPOK tells whether a GET of url answers 200.
func HTTPOK(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Accepts tells whether a TCP connection to the host:port of an http:// or https://
// URL opens.
func Accepts(url string) bool {
	addr := strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
