package nodeagent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// User agents of the kubelet's probes and hooks (pkg/probe/http/request.go,
// pkg/kubelet/lifecycle/handlers.go).
const (
	probeUserAgent = "kube-probe/1.37"
	hookUserAgent  = "kube-lifecycle/1.37"
)

// probeParams are a probe's settings with the API's defaults applied.
type probeParams struct {
	InitialDelay     time.Duration
	Period           time.Duration
	Timeout          time.Duration
	SuccessThreshold int
	FailureThreshold int
}

func paramsOf(p *v1.Probe) probeParams {
	pp := probeParams{
		InitialDelay:     time.Duration(p.InitialDelaySeconds) * time.Second,
		Period:           time.Duration(p.PeriodSeconds) * time.Second,
		Timeout:          time.Duration(p.TimeoutSeconds) * time.Second,
		SuccessThreshold: int(p.SuccessThreshold),
		FailureThreshold: int(p.FailureThreshold),
	}
	if pp.Period <= 0 {
		pp.Period = 10 * time.Second
	}
	if pp.Timeout <= 0 {
		pp.Timeout = time.Second
	}
	if pp.SuccessThreshold <= 0 {
		pp.SuccessThreshold = 1
	}
	if pp.FailureThreshold <= 0 {
		pp.FailureThreshold = 3
	}
	return pp
}

// probeState counts consecutive results the way the kubelet's prober
// worker does (pkg/kubelet/prober/worker.go): the readiness result flips
// only after SuccessThreshold successes or FailureThreshold failures in a
// row, and starts as not ready.
type probeState struct {
	ready     bool
	last      bool
	run       int
	hasResult bool
}

// observe records one probe result and returns the readiness result.
func (s *probeState) observe(ok bool, p probeParams) bool {
	if s.hasResult && s.last == ok {
		s.run++
	} else {
		s.last, s.run, s.hasResult = ok, 1, true
	}
	if ok && s.run >= p.SuccessThreshold {
		s.ready = true
	}
	if !ok && s.run >= p.FailureThreshold {
		s.ready = false
	}
	return s.ready
}

// resolvePort turns a probe or hook port (number or container port name)
// into a number.
func resolvePort(port intstr.IntOrString, c *v1.Container) (int, error) {
	if port.Type == intstr.Int {
		if port.IntVal <= 0 || port.IntVal > 65535 {
			return 0, fmt.Errorf("port %d out of range", port.IntVal)
		}
		return int(port.IntVal), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}

// httpGetURL is the URL of an httpGet action against the pod.
func httpGetURL(h *v1.HTTPGetAction, c *v1.Container, podIP string) (*url.URL, error) {
	port, err := resolvePort(h.Port, c)
	if err != nil {
		return nil, err
	}
	host := h.Host
	if host == "" {
		host = podIP
	}
	scheme := "http"
	if h.Scheme == v1.URISchemeHTTPS {
		scheme = "https"
	}
	u, err := url.Parse(scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	ref, err := url.Parse(h.Path)
	if err != nil {
		return nil, fmt.Errorf("path %q: %w", h.Path, err)
	}
	if ref.Path != "" && ref.Path[0] != '/' {
		ref.Path = "/" + ref.Path
	}
	return u.ResolveReference(ref), nil
}

// httpGet performs an httpGet action; any status in [200, 400) succeeds,
// as for the kubelet's HTTP probes (pkg/probe/http/http.go).
func httpGet(ctx context.Context, h *v1.HTTPGetAction, c *v1.Container, podIP, userAgent string, timeout time.Duration) error {
	u, err := httpGetURL(h, c, podIP)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "*/*")
	for _, hd := range h.HTTPHeaders {
		if hd.Name == "Host" {
			req.Host = hd.Value
			continue
		}
		req.Header.Set(hd.Name, hd.Value)
	}
	client := &http.Client{
		Transport: &http.Transport{
			DisableKeepAlives: true,
			Proxy:             nil,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kubelet probes skip verification too
		},
		// Never follow a redirect: it could point off this machine. A 3xx
		// counts as success, as the kubelet counts a redirect to another
		// host (pkg/probe/http/http.go).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10*1024))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP %d from %s", resp.StatusCode, u)
	}
	return nil
}

// tcpConnect performs a tcpSocket action.
func tcpConnect(ctx context.Context, t *v1.TCPSocketAction, c *v1.Container, podIP string, timeout time.Duration) error {
	port, err := resolvePort(t.Port, c)
	if err != nil {
		return err
	}
	host := t.Host
	if host == "" {
		host = podIP
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return conn.Close()
}

// checkTarget allows a probe or hook only to reach loopback or a pod
// address: the agent never sends anything off this machine, whatever a
// manifest's host field says. Host names are not resolved.
func checkTarget(host string, podCIDR netip.Prefix) error {
	if host == "" || host == "localhost" {
		return nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("host %q: only IP addresses in %s or loopback are probed here", host, podCIDR)
	}
	if a.IsLoopback() || podCIDR.Contains(a.Unmap()) {
		return nil
	}
	return fmt.Errorf("host %s is outside %s and loopback: not probed (traffic stays on this machine)", a, podCIDR)
}

// errNoAction is returned for a probe or hook without a supported action.
var errNoAction = errors.New("no supported action (httpGet, tcpSocket, exec, sleep)")
