// Package haproxy runs Debian's HAProxy (make deps installs it) as a DNS
// client of the local cluster: a server-template whose slots resolve a
// headless Service's name through CoreDNS, in front of the pods it names,
// and a stats socket its own view is read from (epwindow measure
// --observer haproxy). It is a process on the machine like the cluster's
// other data-plane parts.
package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/epwindow/epwindow/deploy/local/internal/child"
	"github.com/epwindow/epwindow/deploy/local/internal/freeport"
)

// Backend is the backend (and frontend) name in the configuration: what
// measure's --haproxy-backend names.
const Backend = "probe"

// Config says what HAProxy resolves and how often.
type Config struct {
	// Binary is the haproxy executable; "" finds it on the system PATH.
	Binary string
	// Nameserver is CoreDNS's address: the only resolver HAProxy asks.
	Nameserver netip.AddrPort
	// Name is the fully qualified headless Service name the slots resolve,
	// Port the port its pods serve.
	Name string
	Port int
	// Slots is the server-template's size: the most addresses HAProxy
	// routes to at once.
	Slots int
	// ResolveEvery is HAProxy's `timeout resolve`: how often it asks again
	// (src/resolvers.c, resolv_resolution_timeout; HAProxy's default 1 s).
	ResolveEvery time.Duration
	// Dir holds haproxy.cfg and the stats socket; LogFile receives
	// HAProxy's output.
	Dir, LogFile string
}

// HAProxy is a running HAProxy child process.
type HAProxy struct {
	// URL is its frontend on loopback; Socket its stats socket
	// (unix://path), level admin.
	URL, Socket string
	*child.Process
}

// Validate checks cfg before anything starts.
func (cfg Config) Validate() error {
	switch {
	case !cfg.Nameserver.IsValid():
		return errors.New("haproxy: no nameserver (it needs CoreDNS: --dns)")
	case cfg.Name == "" || strings.ContainsAny(cfg.Name, " \t\n"):
		return fmt.Errorf("haproxy: name %q", cfg.Name)
	case cfg.Port < 1 || cfg.Port > 65535:
		return fmt.Errorf("haproxy: port %d", cfg.Port)
	case cfg.Slots < 1 || cfg.Slots > 1000:
		return fmt.Errorf("haproxy: %d slots: want 1 to 1000", cfg.Slots)
	case cfg.ResolveEvery < time.Millisecond || cfg.ResolveEvery > time.Hour:
		return fmt.Errorf("--haproxy-resolve %s: want 1ms to 1h", cfg.ResolveEvery)
	}
	return nil
}

// File is haproxy.cfg for cfg, its frontend on 127.0.0.1:port and its
// stats socket at socket. Nothing else is resolved, and nothing is sent
// off the machine: the only nameserver is CoreDNS, which forwards nothing.
func File(cfg Config, port int, socket string) string {
	return fmt.Sprintf(`global
    stats socket %s mode 600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
resolvers coredns
    nameserver coredns %s
    accepted_payload_size 8192
    timeout resolve %dms
    timeout retry 1s
frontend %s
    bind 127.0.0.1:%d
    default_backend %s
backend %s
    balance roundrobin
    server-template srv %d %s:%d resolvers coredns init-addr none resolve-prefer ipv4
`, socket, cfg.Nameserver, cfg.ResolveEvery.Milliseconds(), Backend, port, Backend, Backend, cfg.Slots, strings.TrimSuffix(cfg.Name, "."), cfg.Port)
}

// Start writes haproxy.cfg, runs HAProxy in the foreground and returns
// once its stats socket answers. HAProxy is killed if this process dies.
func Start(ctx context.Context, cfg Config) (*HAProxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Binary == "" {
		// Debian installs it in /usr/sbin, which the user's PATH may lack.
		bin, err := exec.LookPath("haproxy")
		if err != nil {
			if _, serr := os.Stat("/usr/sbin/haproxy"); serr != nil {
				return nil, fmt.Errorf("haproxy: not installed (run make deps: Debian's haproxy): %w", err)
			}
			bin = "/usr/sbin/haproxy"
		}
		cfg.Binary = bin
	}
	return child.Retry(ctx, 3, func() (*HAProxy, error) { return start(ctx, cfg) })
}

func start(ctx context.Context, cfg Config) (*HAProxy, error) {
	ports, err := freeport.Loopback(1)
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(cfg.Dir, "haproxy.sock")
	_ = os.Remove(socket)
	path := filepath.Join(cfg.Dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(File(cfg, ports[0], socket)), 0o644); err != nil {
		return nil, err
	}
	// -db: stay in the foreground, as a child that stops with its parent.
	proc, err := child.Launch(cfg.Binary, []string{"-db", "-f", path}, cfg.LogFile)
	if err != nil {
		return nil, err
	}
	h := &HAProxy{URL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), Socket: "unix://" + socket, Process: proc}
	if err := proc.WaitReady(ctx, "haproxy", filepath.Base(cfg.LogFile), 50*time.Millisecond, 30*time.Second, func() bool {
		out, err := Command(socket, "show servers state "+Backend)
		return err == nil && strings.HasPrefix(out, "1\n")
	}); err != nil {
		return nil, err
	}
	return h, nil
}

// Command sends one runtime API command to the stats socket at path and
// returns the answer.
func Command(path, cmd string) (string, error) {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\n", cmd); err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String(), sc.Err()
}
