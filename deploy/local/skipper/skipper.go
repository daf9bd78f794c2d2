package skipper

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/epwindow/epwindow/deploy/local/internal/freeport"
)

// Config says how to run Skipper against the local API server.
type Config struct {
	// Binary is the skipper executable (bin/skipper from `make cluster`).
	Binary string
	// APIServerURL is https://127.0.0.1:PORT.
	APIServerURL string
	// CAFile verifies the API server (passed as SSL_CERT_FILE).
	CAFile string
	// TokenFile holds the bearer token Skipper sends.
	TokenFile string
	// PollInterval is -source-poll-timeout: how often Skipper lists
	// Ingresses, Services and EndpointSlices. Skipper's default is 3s.
	PollInterval time.Duration
	// LogFile receives Skipper's stdout and stderr.
	LogFile string
}

// Skipper is a running Skipper child process.
type Skipper struct {
	// URL is the proxy listener, http://127.0.0.1:PORT.
	URL string
	// RoutesURL is the support listener's route table,
	// http://127.0.0.1:PORT/routes (JSON with Accept: application/json).
	RoutesURL string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Args are Skipper's flags for cfg on the given loopback ports. Every
// listener Skipper opens by default (-address :9090, -support-listener and
// -metrics-listener :9911) is pointed at 127.0.0.1; the others it has
// (debug, validation webhook, swarm) are off by default.
func Args(cfg Config, proxyPort, supportPort int) []string {
	support := "127.0.0.1:" + strconv.Itoa(supportPort)
	return []string{
		"-address=127.0.0.1:" + strconv.Itoa(proxyPort),
		"-support-listener=" + support,
		"-metrics-listener=" + support,
		"-kubernetes",
		"-kubernetes-url=" + cfg.APIServerURL,
		"-kubernetes-token-file=" + cfg.TokenFile,
		// Class "skipper"; Ingresses without a class are served too
		// (dataclients/kubernetes/clusterclient.go, ingress filter).
		"-kubernetes-ingress-class=^skipper$",
		"-enable-kubernetes-endpointslices",
		"-kubernetes-https-redirect=false",
		"-source-poll-timeout=" + strconv.FormatInt(cfg.PollInterval.Milliseconds(), 10),
		// The default (45s) keeps the listeners open after SIGTERM for a
		// load balancer that does not exist here.
		"-wait-for-healthcheck-interval=0",
		// Do not open the proxy port before the first route table is in.
		"-wait-first-route-load",
		"-access-log-disabled",
	}
}

// Start runs Skipper and returns once its route table answers and its proxy
// port accepts connections. Ports are picked free just before use; if
// Skipper exits at once (a port taken meanwhile), it is retried on new ports.
// Skipper is killed if this process dies (Pdeathsig), so a crash leaves no
// orphan holding the ports.
func Start(ctx context.Context, cfg Config) (*Skipper, error) {
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("skipper binary: %w (run make cluster)", err)
	}
	if cfg.PollInterval < time.Millisecond {
		return nil, fmt.Errorf("--ingress-poll (%s) must be at least 1ms", cfg.PollInterval)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := start(ctx, cfg)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, cfg Config) (*Skipper, error) {
	ports, err := freeport.Loopback(2)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open skipper log: %w", err)
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(cfg.Binary, Args(cfg, ports[0], ports[1])...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+cfg.CAFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start skipper: %w", err)
	}
	s := &Skipper{
		URL:       fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		RoutesURL: fmt.Sprintf("http://127.0.0.1:%d/routes", ports[1]),
		cmd:       cmd,
		done:      make(chan struct{}),
	}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Skipper) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		if s.routesOK(ctx, client) && s.proxyAccepts() {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("skipper exited while starting (see skipper.log): %v", s.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("skipper not ready after %s (see skipper.log)", timeout)
		}
	}
}

func (s *Skipper) routesOK(ctx context.Context, client *http.Client) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.RoutesURL, nil)
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

func (s *Skipper) proxyAccepts() bool {
	c, err := net.DialTimeout("tcp", s.URL[len("http://"):], time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Done is closed when the Skipper process has exited.
func (s *Skipper) Done() <-chan struct{} { return s.done }

// Err is the process's exit error; valid after Done is closed.
func (s *Skipper) Err() error { return s.err }

// Stop sends SIGTERM, waits up to 10s, then SIGKILLs.
func (s *Skipper) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// PID is the Skipper process id.
func (s *Skipper) PID() int { return s.cmd.Process.Pid }
