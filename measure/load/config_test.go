package load

import (
	"crypto/tls"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{URL: "http://127.0.0.1:8080/", Rate: 50}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"valid", func(*Config) {}, ""},
		{"valid https with host", func(c *Config) { c.URL = "https://lb.example/x"; c.Host = "app.example" }, ""},
		{"missing url", func(c *Config) { c.URL = "" }, "--url is required"},
		{"bad scheme", func(c *Config) { c.URL = "ftp://x/" }, "--url"},
		{"no scheme", func(c *Config) { c.URL = "127.0.0.1:8080" }, "--url"},
		{"no host", func(c *Config) { c.URL = "http:///x" }, "--url"},
		{"zero rate", func(c *Config) { c.Rate = 0 }, "--rate"},
		{"negative rate", func(c *Config) { c.Rate = -3 }, "--rate"},
		{"NaN rate", func(c *Config) { c.Rate = math.NaN() }, "--rate"},
		{"infinite rate", func(c *Config) { c.Rate = math.Inf(1) }, "--rate"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "--load-timeout"},
		{"negative max conns", func(c *Config) { c.MaxConns = -1 }, "--load-max-conns"},
		{"negative history", func(c *Config) { c.FailureHistory = -1 }, "failure history"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name         string
		in           Config
		wantTimeout  time.Duration
		wantMaxConns int
	}{
		{"all defaults", Config{Rate: 100}, DefaultTimeout, 500},
		{"low rate gets the floor", Config{Rate: 1, Timeout: time.Second}, time.Second, 16},
		{"explicit kept", Config{Rate: 100, Timeout: time.Second, MaxConns: 7}, time.Second, 7},
		{"fractional product rounds up", Config{Rate: 33.3, Timeout: time.Second}, time.Second, 34},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.withDefaults()
			if got.Timeout != tt.wantTimeout || got.MaxConns != tt.wantMaxConns || got.FailureHistory != DefaultFailureHistory {
				t.Errorf("withDefaults() = timeout %v, max conns %d, history %d; want %v, %d, %d",
					got.Timeout, got.MaxConns, got.FailureHistory, tt.wantTimeout, tt.wantMaxConns, DefaultFailureHistory)
			}
		})
	}
}

func TestNewTransport(t *testing.T) {
	tests := []struct {
		name           string
		cfg            Config
		wantServerName string
		wantKeepAlive  bool
	}{
		{"no host: default TLS", Config{Rate: 1, MaxConns: 3}, "", false},
		{"host names the TLS server", Config{Rate: 1, Host: "app.example:443", KeepAlive: true}, "app.example", true},
		{"explicit server name kept", Config{Rate: 1, Host: "app.example", TLS: &tls.Config{ServerName: "lb.example"}}, "lb.example", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg.withDefaults()
			tr := newTransport(cfg)
			var got string
			if tr.TLSClientConfig != nil {
				got = tr.TLSClientConfig.ServerName
			}
			if got != tt.wantServerName || tr.DisableKeepAlives == tt.wantKeepAlive || tr.MaxConnsPerHost != cfg.MaxConns || tr.Proxy != nil {
				t.Errorf("transport: server name %q, keep-alives disabled %v, max conns %d; want %q, %v, %d, no proxy",
					got, tr.DisableKeepAlives, tr.MaxConnsPerHost, tt.wantServerName, !tt.wantKeepAlive, cfg.MaxConns)
			}
		})
	}
}
