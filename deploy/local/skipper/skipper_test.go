package skipper

import (
	"strings"
	"testing"
	"time"
)

func TestArgs(t *testing.T) {
	cfg := Config{
		APIServerURL: "https://127.0.0.1:6443",
		TokenFile:    "/tmp/x/pki/skipper.token",
		PollInterval: 1500 * time.Millisecond,
	}
	args := Args(cfg, 4000, 4001)
	flags := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		flags[k] = v
	}
	// Every listener Skipper opens by default must be on loopback
	// (config/config.go: -address :9090, -support-listener and
	// -metrics-listener :9911).
	for _, l := range []string{"address", "support-listener", "metrics-listener"} {
		if v, ok := flags[l]; !ok || !strings.HasPrefix(v, "127.0.0.1:") {
			t.Errorf("-%s = %q, want a 127.0.0.1 address", l, v)
		}
	}
	want := map[string]string{
		"address":                       "127.0.0.1:4000",
		"support-listener":              "127.0.0.1:4001",
		"kubernetes-url":                cfg.APIServerURL,
		"kubernetes-token-file":         cfg.TokenFile,
		"source-poll-timeout":           "1500",
		"kubernetes-ingress-class":      "^skipper$",
		"wait-for-healthcheck-interval": "0",
		"kubernetes-https-redirect":     "false",
	}
	for k, v := range want {
		if flags[k] != v {
			t.Errorf("-%s = %q, want %q", k, flags[k], v)
		}
	}
	for _, b := range []string{"kubernetes", "enable-kubernetes-endpointslices", "experimental-upgrade"} {
		if _, ok := flags[b]; !ok {
			t.Errorf("-%s missing", b)
		}
	}
}
