package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/measure"
)

// parseWith runs cmd's flag parsing on args and returns what build makes
// of the parsed flags.
func parseWith[T any](t *testing.T, cmd *cli.Command, build func(*cli.Context) (T, error), args ...string) (T, error) {
	t.Helper()
	var out T
	var buildErr error
	cmd.Action = func(c *cli.Context) error {
		out, buildErr = build(c)
		return nil
	}
	app := &cli.App{Name: "epwindow", Commands: []*cli.Command{cmd}, Writer: &strings.Builder{}, ErrWriter: &strings.Builder{}}
	if err := app.Run(append([]string{"epwindow", cmd.Name}, args...)); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return out, buildErr
}

// parseMeasure returns the typed configuration measure builds from args.
func parseMeasure(t *testing.T, args ...string) (measure.Config, error) {
	t.Helper()
	return parseWith(t, measureCommand(), measureConfig, args...)
}

// Every flag reaches its Config field: a flag that is parsed but not copied
// over silently runs with the default.
func TestMeasureConfigFromFlags(t *testing.T) {
	cfg, err := parseMeasure(t, "--url", "http://127.0.0.1:9090", "--trials", "7", "--replicas", "4", "--mode", "rollout",
		"--hold", "45s", "--quiet-period", "4s", "--grace-margin", "12s", "--settle-timeout", "2m", "--max-skew-uncertainty", "20ms",
		"--drain", "3s", "--ingress-class", "nginx", "--host", "probe.example.com", "--observer", "none",
		"--observer-interval", "250ms", "--rate", "80", "--keepalive", "--load-method", "POST", "--load-timeout", "2s",
		"--load-max-conns", "64", "--image", "registry.example.com/epwindow:v1", "--prestop-sleep", "5s",
		"--exit-on-sigterm", "--keep", "--stop-on-blind-observer", "-n", "team-a", "--readiness=false", "--listen-delay", "3s",
		"--deregistration-delay", "15s", "--in-cluster-load", "2", "--in-cluster-rate", "120")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Trials", cfg.Trials, 7}, {"Replicas", cfg.Replicas, int32(4)}, {"Mode", cfg.Mode, measure.ModeRollout},
		{"Hold", cfg.Hold, 45 * time.Second}, {"QuietPeriod", cfg.QuietPeriod, 4 * time.Second},
		{"GraceMargin", cfg.GraceMargin, 12 * time.Second}, {"SettleTimeout", cfg.SettleTimeout, 2 * time.Minute},
		{"MaxSkewUncertainty", cfg.MaxSkewUncertainty, 20 * time.Millisecond}, {"Drain", cfg.Drain, 3 * time.Second},
		{"IngressClass", cfg.IngressClass, "nginx"}, {"Host", cfg.Host, "probe.example.com"}, {"Observer", cfg.Observer, "none"},
		{"ObserverOptions.Interval", cfg.ObserverOptions.Interval, 250 * time.Millisecond}, {"Rate", cfg.Rate, 80.0},
		{"KeepAlive", cfg.KeepAlive, true}, {"LoadMethod", cfg.LoadMethod, http.MethodPost},
		{"LoadTimeout", cfg.LoadTimeout, 2 * time.Second}, {"LoadMaxConns", cfg.LoadMaxConns, 64},
		{"Image", cfg.Image, "registry.example.com/epwindow:v1"}, {"PreStop", cfg.PreStop, true},
		{"PreStopSleep", cfg.PreStopSleep, 5 * time.Second}, {"ExitOnSigterm", cfg.ExitOnSigterm, true},
		{"Keep", cfg.Keep, true}, {"StopOnBlindObserver", cfg.StopOnBlindObserver, true}, {"Namespace", cfg.Namespace, "team-a"},
		{"URL", cfg.URL.String(), "http://127.0.0.1:9090"},
		{"NoReadiness", cfg.NoReadiness, true}, {"ProbeListenDelay", cfg.ProbeListenDelay, 3 * time.Second},
		{"DeregistrationDelay", cfg.DeregistrationDelay, 15 * time.Second},
		{"InClusterLoad", cfg.InClusterLoad, 2}, {"InClusterRate", cfg.InClusterRate, 120.0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestMeasureConfigRejects(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "http://x", "--load-method", "PUT"}, "--load-method"},
		{[]string{"--url", "http://x", "--observer-interval", "0s"}, "--observer-interval"},
		{[]string{"--url", "http://x", "--trials", "0"}, "--trials (0)"},
		{[]string{"--url", "http://x", "--grace-margin", "0s"}, "--grace-margin"},
		{[]string{"--url", "http://x", "--deregistration-delay", "-1s"}, "--deregistration-delay"},
		{[]string{"--url", "http://x", "--in-cluster-load", "2", "--in-cluster-rate", "0"}, "--in-cluster-rate (0)"},
		{[]string{"--url", "http://x", "--in-cluster-load", "2", "--in-cluster-rate", "-1"}, "--in-cluster-rate (-1)"},
		{[]string{"--url", "http://x", "--in-cluster-load", "2", "--in-cluster-rate", "9000"}, "--in-cluster-rate (9000)"},
		{[]string{"--url", "http://x", "--in-cluster-load", "-1"}, "--in-cluster-load (-1)"},
		{[]string{"--url", "http://x", "--route", "grpcroute"}, `--route "grpcroute": want ingress or httproute`},
		{[]string{"--url", "http://x", "--route", "httproute"}, "--gateway NAMESPACE/NAME is required with --route httproute"},
		{[]string{"--url", "http://x", "--route", "httproute", "--gateway", "traefik"}, `--gateway "traefik": want NAMESPACE/NAME`},
		{[]string{"--url", "http://x", "--route", "httproute", "--gateway", "gw/traefik/web"}, "want NAMESPACE/NAME"},
		{[]string{"--url", "http://x", "--gateway", "gw/traefik"}, "--gateway gw/traefik applies to --route httproute only"},
		{[]string{"--url", "http://x", "--gateway-section", "web"}, "--gateway-section web applies to --route httproute only"},
		{[]string{"--url", "http://x", "--route", "httproute", "--gateway", "gw/traefik", "--ingress-class", "nginx"}, "--ingress-class nginx applies to --route ingress only"},
		{[]string{"--url", "http://x", "--route", "httproute", "--gateway", "gw/traefik", "--overlay", "traefik"}, "--overlay traefik applies to --route ingress only"},
	} {
		if _, err := parseMeasure(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one naming %s", tt.args, err, tt.want)
		}
	}
}

// Without --in-cluster-load nothing about runners is configured, whatever
// the rate says.
func TestMeasureNoRunnersByDefault(t *testing.T) {
	cfg, err := parseMeasure(t, "--url", "http://127.0.0.1:9090")
	if err != nil || cfg.InClusterLoad != 0 {
		t.Errorf("default InClusterLoad %d (%v), want 0", cfg.InClusterLoad, err)
	}
}

// --route httproute with its Gateway reaches the Config; the Ingress run
// stays the default.
func TestMeasureConfigHTTPRoute(t *testing.T) {
	cfg, err := parseMeasure(t, "--url", "http://127.0.0.1:9090", "--route", "httproute", "--gateway", "gw/traefik", "--gateway-section", "web")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Route != measure.RouteHTTPRoute || cfg.Gateway != (measure.GatewayRef{Namespace: "gw", Name: "traefik", Section: "web"}) {
		t.Errorf("Route %q Gateway %+v", cfg.Route, cfg.Gateway)
	}
	if cfg, err := parseMeasure(t, "--url", "http://127.0.0.1:9090"); err != nil || cfg.Route != measure.RouteIngress || !cfg.Gateway.IsZero() {
		t.Errorf("default Route %q Gateway %+v (%v), want an Ingress", cfg.Route, cfg.Gateway, err)
	}
}

// The progress line says when the run goes past --trials to replace
// trials without a valid window, and by how much it may.
func TestProgressLineReplacements(t *testing.T) {
	u := measure.Progress{Phase: "steady", Trial: 60, Trials: 59, Extra: 1, MaxExtra: 12, Message: "58/59 valid", LastWindow: 2345 * time.Millisecond}
	line := progressLine(u)
	if !strings.Contains(line, "60/60") || !strings.Contains(line, "(+1/≤12: too few valid)") || !strings.Contains(line, "58/59 valid") {
		t.Errorf("progress line %q: want 60/60, the replacement count and the message", line)
	}
	if n := utf8.RuneCountInString(line); n > 100 {
		t.Errorf("progress line is %d columns: %q", n, line)
	}
	if line := progressLine(measure.Progress{Phase: "trial", Trial: 3, Trials: 59}); strings.Contains(line, "too few valid") {
		t.Errorf("progress line %q mentions replacements without any", line)
	}
}
