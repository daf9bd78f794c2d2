package load

import (
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by New for zero Config fields.
const (
	// DefaultTimeout bounds one request, connect to last body byte.
	DefaultTimeout = 5 * time.Second
	// DefaultFailureHistory is how many failure events are kept (16 bytes each).
	DefaultFailureHistory = 1 << 17
	// maxBody is how much of a response body is read (and discarded) so that
	// a keep-alive connection can be reused; the probe's bodies are tiny.
	maxBody = 1 << 20
)

// Config is the load to drive. Zero values of the optional fields get the
// defaults documented on each field.
type Config struct {
	// URL is the ingress as reachable from where the tool runs (--url),
	// http or https; every request is a GET of it.
	URL string
	// Host, if set, is sent as the Host header (and TLS server name) so the
	// Ingress rule matches even when URL names an address (--host).
	Host string
	// Rate is the request rate in requests per second (--rate).
	Rate float64
	// KeepAlive reuses connections; false opens a new connection per
	// request, which is what exposes refused connects to a dying pod
	// (--keepalive).
	KeepAlive bool
	// Timeout bounds each request (--load-timeout); DefaultTimeout if zero.
	Timeout time.Duration
	// MaxConns caps requests in flight, and so connections (--load-max-conns).
	// A request due while the cap is reached is dropped and counted, never
	// queued. Zero means Rate × Timeout (every request may hang for the full
	// timeout without a drop), at least 16.
	MaxConns int
	// FailureHistory is how many failure events are kept for Failures;
	// DefaultFailureHistory if zero.
	FailureHistory int
	// TLS configures https URLs; nil uses the system roots.
	TLS *tls.Config
	// Method is GET (the default) or POST (--load-method). Ingress
	// controllers retry a GET whose connect failed on another endpoint but
	// never a request with a body (Skipper: proxy/proxy.go retryable;
	// ingress-nginx: proxy_next_upstream without non_idempotent), so POST
	// load shows the refused connects that users of non-idempotent APIs see
	// as 502s.
	Method string
	// Body is what a POST carries; empty means a short fixed body. Any
	// body makes the request non-idempotent, which is what matters here.
	Body string
	// UnattributedOK counts a 2xx without X-Epwindow-Pod as a success
	// (Totals().Unattributed) and keeps it out of the failure history, so
	// the history holds only failures: verify drives load at a team's app,
	// which answers so on every request and would otherwise fill the
	// history in minutes and push real failures out of it.
	UnattributedOK bool
}

// Validate reports the first problem with c, naming the flag to change.
func (c Config) Validate() error {
	if c.URL == "" {
		return fmt.Errorf("--url is required: the ingress address as reachable from here, e.g. http://127.0.0.1:8080/")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("--url %q: %w", c.URL, err)
	}
	switch {
	case u.Scheme == SchemeDNS:
		// dns://[SERVER]/NAME:PORT, grpc-go's target syntax (the
		// authority, if any, is the DNS server to ask).
		name := strings.TrimPrefix(u.Path, "/")
		if _, port, err := net.SplitHostPort(name); err != nil || port == "" {
			return fmt.Errorf("--url %q: a gRPC target is dns:///NAME:PORT (or dns://DNS-SERVER/NAME:PORT)", c.URL)
		}
		if c.Method == http.MethodPost {
			return fmt.Errorf("--load-method POST: a gRPC --url (%s) makes unary calls, which have no method", c.URL)
		}
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("--url %q: scheme must be http, https or dns (gRPC)", c.URL)
	case u.Host == "":
		return fmt.Errorf("--url %q: no host", c.URL)
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate <= 0 {
		return fmt.Errorf("--rate (%v) must be a positive number of requests per second", c.Rate)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("--load-timeout (%v) must not be negative", c.Timeout)
	}
	if c.MaxConns < 0 {
		return fmt.Errorf("--load-max-conns (%d) must not be negative", c.MaxConns)
	}
	if c.Method != "" && c.Method != http.MethodGet && c.Method != http.MethodPost {
		return fmt.Errorf("--load-method %q: want GET or POST", c.Method)
	}
	if c.FailureHistory < 0 {
		return fmt.Errorf("failure history (%d) must not be negative", c.FailureHistory)
	}
	return nil
}

// isGRPC reports whether rawURL is a gRPC target (SchemeDNS).
func isGRPC(rawURL string) bool { return strings.HasPrefix(rawURL, SchemeDNS+":") }

// withDefaults fills the zero optional fields.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxConns == 0 {
		n := math.Ceil(c.Rate * c.Timeout.Seconds())
		switch {
		case n < 16:
			c.MaxConns = 16
		case n > 1<<20:
			c.MaxConns = 1 << 20
		default:
			c.MaxConns = int(n)
		}
	}
	if c.FailureHistory == 0 {
		c.FailureHistory = DefaultFailureHistory
	}
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	return c
}
