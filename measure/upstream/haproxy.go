package upstream

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// KindHAProxy reads HAProxy's own view of its servers through its runtime
// API (the stats socket): `show servers state`.
const KindHAProxy = "haproxy"

// FlagHAProxyBackend names the backend whose servers are read.
const FlagHAProxyBackend = "haproxy-backend"

// haproxyObserver sends one `show servers state [backend]` per replica at
// each poll: the management CLI (doc/management.txt, "show servers state")
// answers one command per connection in non-interactive mode and closes.
// Its replicas are stats sockets: unix:///path or tcp://host:port
// (--observer-url). A pod's stats socket is a unix path no port-forward
// reaches, so HAProxy is read only where its socket is exposed.
type haproxyObserver struct {
	sockets  []string
	backend  string
	interval time.Duration
	timeout  time.Duration
	clock    clock.PassiveClock
}

func newHAProxy(deps Deps, opts Options, backend string) (Observer, error) {
	if len(opts.URLs) == 0 {
		return nil, fmt.Errorf("--%s %s needs --%s: HAProxy's stats socket, unix:///run/haproxy/admin.sock or tcp://host:port (its `stats socket` line, level operator or admin)",
			FlagObserver, KindHAProxy, FlagObserverURL)
	}
	for _, u := range opts.URLs {
		if _, _, err := haproxySocket(u); err != nil {
			return nil, err
		}
	}
	if strings.ContainsAny(backend, " \t\n") {
		return nil, fmt.Errorf("--%s %q: not a backend name", FlagHAProxyBackend, backend)
	}
	return &haproxyObserver{sockets: opts.URLs, backend: backend, interval: opts.Interval, timeout: opts.Timeout, clock: deps.Clock}, nil
}

// haproxySocket reads one --observer-url of the haproxy observer.
func haproxySocket(s string) (network, addr string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("--%s %q: %w", FlagObserverURL, s, err)
	}
	switch {
	case u.Scheme == "unix" && u.Path != "":
		return "unix", u.Path, nil
	case u.Scheme == "tcp" && u.Host != "":
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return "", "", fmt.Errorf("--%s %q: want tcp://host:port: %w", FlagObserverURL, s, err)
		}
		return "tcp", u.Host, nil
	}
	return "", "", fmt.Errorf("--%s %q: want HAProxy's stats socket as unix:///path or tcp://host:port", FlagObserverURL, s)
}

func (o *haproxyObserver) Name() string                               { return KindHAProxy }
func (o *haproxyObserver) Resolution() time.Duration                  { return o.interval }
func (o *haproxyObserver) Settings(context.Context) map[string]string { return nil }
func (o *haproxyObserver) Close() error                               { return nil }

func (o *haproxyObserver) Poll(ctx context.Context) (Snapshot, error) {
	return pollReplicas(ctx, KindHAProxy, o.clock, urlSource(o.sockets), o.read)
}

func (o *haproxyObserver) read(ctx context.Context, ep endpoint) ReplicaUpstreams {
	r := ReplicaUpstreams{Replica: ep.Replica, Sent: o.clock.Now()}
	body, err := o.command(ctx, ep.BaseURL, strings.TrimSpace("show servers state "+o.backend))
	r.At = o.clock.Now()
	r.Bytes = int64(len(body))
	if err != nil {
		r.Err = fmt.Errorf("haproxy %s: %w", ep.Replica, err)
		return r
	}
	if r.Upstreams, err = upstreamsFromHAProxy(body); err != nil {
		r.Err = fmt.Errorf("haproxy %s: %w", ep.Replica, err)
	}
	return r
}

// command sends one runtime API command and reads the answer to the end.
func (o *haproxyObserver) command(ctx context.Context, socket, cmd string) ([]byte, error) {
	network, addr, err := haproxySocket(socket)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: o.timeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("%w (is HAProxy's `stats socket` at %s? set --%s)", err, socket, FlagObserverURL)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(o.timeout))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(c, maxBody))
}

// HAProxy's server states (include/haproxy/server-t.h, enum srv_state):
// new traffic goes to running and starting servers only.
const (
	haproxyStopped  = 0
	haproxyStarting = 1
	haproxyRunning  = 2
)

// upstreamsFromHAProxy parses `show servers state` (version 1): a version
// line, a "# " header naming the fields, then one line per server. A
// server receives new traffic when it has an address (not "-"), is
// running or starting, has no admin bit set (maintenance of any origin,
// RMAINT 0x20 when its DNS name stopped resolving, or drain) and a
// non-zero weight. Fields are found by the header's names.
func upstreamsFromHAProxy(b []byte) ([]netip.AddrPort, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxBody)
	var col map[string]int
	var out []netip.AddrPort
	line := 0
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		line++
		switch {
		case text == "":
			continue
		case line == 1:
			if text != "1" {
				// A refusal ("Can't find backend.", "Permission denied")
				// is one line of text instead of the version.
				return nil, fmt.Errorf("show servers state: %s", firstLine(b))
			}
			continue
		case strings.HasPrefix(text, "# "):
			col = map[string]int{}
			for i, f := range strings.Fields(strings.TrimPrefix(text, "# ")) {
				col[f] = i
			}
			continue
		case col == nil:
			return nil, fmt.Errorf("show servers state: no header line: %s", firstLine(b))
		}
		f := strings.Fields(text)
		get := func(name string) (string, bool) {
			i, ok := col[name]
			if !ok || i >= len(f) {
				return "", false
			}
			return f[i], true
		}
		addr, ok1 := get("srv_addr")
		op, ok2 := get("srv_op_state")
		admin, ok3 := get("srv_admin_state")
		weight, ok4 := get("srv_uweight")
		port, ok5 := get("srv_port")
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			return nil, fmt.Errorf("show servers state: line %d lacks a field: %q", line, text)
		}
		if addr == "-" {
			continue
		}
		opN, err1 := strconv.Atoi(op)
		adminN, err2 := strconv.Atoi(admin)
		weightN, err3 := strconv.Atoi(weight)
		portN, err4 := strconv.ParseUint(port, 10, 16)
		ip, err5 := netip.ParseAddr(addr)
		if err := firstErr(err1, err2, err3, err4, err5); err != nil {
			return nil, fmt.Errorf("show servers state: line %d: %w", line, err)
		}
		if (opN != haproxyRunning && opN != haproxyStarting) || adminN != 0 || weightN == 0 {
			continue
		}
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(portN)))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if col == nil {
		// "Can't find backend." and other refusals are one line of text.
		return nil, fmt.Errorf("show servers state: %s", firstLine(b))
	}
	return dedup(out), nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
