package measure

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func validConfig() Config {
	u, _ := url.Parse("http://127.0.0.1:9090")
	return Config{
		Client: fake.NewClientset(), Trials: 20, Replicas: 3, Mode: ModeDelete, URL: u, Rate: 50,
		Hold: 60 * time.Second, QuietPeriod: 5 * time.Second, GraceMargin: 10 * time.Second,
		SettleTimeout: 2 * time.Minute, MaxSkewUncertainty: 50 * time.Millisecond, Image: "epwindow:dev", PreStop: true,
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // substring of the error; "" means valid
	}{
		{"defaults are valid", func(*Config) {}, ""},
		{"zero trials", func(c *Config) { c.Trials = 0 }, "--trials (0) must be at least 1"},
		{"kube-proxy metrics not a URL", func(c *Config) { c.KubeProxyMetrics = "10.0.0.1:10249" }, "--kube-proxy-metrics"},
		{"kube-proxy metrics URL", func(c *Config) { c.KubeProxyMetrics = "http://127.0.0.1:10249/metrics" }, ""},
		{"one replica", func(c *Config) { c.Replicas = 1 }, "--replicas (1) must be at least 2"},
		{"dns server without --dns", func(c *Config) { c.DNSOptions.Servers = []string{"10.96.0.10"} }, "--dns-server and --dns-name need --dns"},
		{"dns name without --dns", func(c *Config) { c.DNSOptions.Name = "probe.ns.svc.cluster.local" }, "need --dns"},
		{"dns", func(c *Config) { c.DNS, c.DNSOptions.Servers = true, []string{"10.96.0.10"} }, ""},
		{"publish not ready without --dns", func(c *Config) { c.DNSPublishNotReady = true }, "--dns-publish-not-ready needs --dns"},
		{"publish not ready with --dns", func(c *Config) { c.DNS, c.DNSPublishNotReady = true, true }, ""},
		{"grpc without --dns", func(c *Config) { c.GRPCDNSRate = 10 }, "--grpc-dns-rate needs --dns"},
		{"grpc without a server", func(c *Config) { c.DNS, c.GRPCDNSRate = true, 10 }, "--grpc-dns-rate needs --dns-server"},
		{"grpc beside HAProxy's name", func(c *Config) {
			c.DNS, c.GRPCDNSRate, c.DNSOptions.Name, c.DNSOptions.Servers = true, 10, "haproxy-backends.epwindow", []string{"10.96.0.10"}
		}, "time HAProxy's path with --dns-name alone, and the gRPC client in a run of its own without it (epwindow measure --dns --dns-server ADDR --grpc-dns-rate 10)"},
		{"grpc in the runners", func(c *Config) { c.DNS, c.GRPCDNSRate, c.InClusterLoad, c.InClusterRate = true, 10, 1, 10 }, ""},
		{"grpc with a server", func(c *Config) {
			c.DNS, c.GRPCDNSRate, c.DNSOptions.Servers = true, 10, []string{"10.96.0.10"}
		}, ""},
		{"grpc rate too high", func(c *Config) {
			c.DNS, c.GRPCDNSRate, c.DNSOptions.Servers = true, 1e9, []string{"10.96.0.10"}
		}, "--grpc-dns-rate (1e+09) must be above 0"},
		{"age without grpc", func(c *Config) { c.GRPCMaxConnectionAge = time.Second }, "--grpc-max-connection-age needs --grpc-dns-rate"},
		{"negative dns interval", func(c *Config) { c.DNS, c.DNSOptions.Interval = true, -time.Second }, "--dns-interval (-1s) must not be negative"},
		{"unknown mode", func(c *Config) { c.Mode = "chaos" }, `--mode "chaos"`},
		{"no url", func(c *Config) { c.URL = nil }, "--url is required"},
		{"url without scheme", func(c *Config) { c.URL, _ = url.Parse("127.0.0.1:9090") }, "--url"},
		{"zero rate", func(c *Config) { c.Rate = 0 }, "--rate (0) must be above 0"},
		{"hold shorter than quiet period", func(c *Config) { c.Hold = 3 * time.Second }, "--hold (3s) must exceed --quiet-period (5s)"},
		{"negative hold", func(c *Config) { c.Hold = -time.Second }, "--hold (-1s) must not be negative"},
		{"negative drain", func(c *Config) { c.Drain = -time.Second }, "--drain (-1s) must not be negative"},
		{"zero quiet period", func(c *Config) { c.QuietPeriod = 0 }, "--quiet-period (0s) must be above 0"},
		{"sleep without prestop", func(c *Config) { c.PreStop = false; c.PreStopSleep = time.Second }, "--prestop-sleep needs --prestop"},
		{"sleep longer than hold", func(c *Config) { c.PreStopSleep = time.Minute }, "--prestop-sleep (1m0s) must be shorter than --hold (1m0s)"},
		{"no image", func(c *Config) { c.Image = "" }, "--image must name the probe image"},
		{"httproute", func(c *Config) { c.Route, c.Gateway = RouteHTTPRoute, GatewayRef{Namespace: "gw", Name: "traefik"} }, ""},
		{"unknown route", func(c *Config) { c.Route = "tcproute" }, `--route "tcproute"`},
		{"httproute without gateway", func(c *Config) { c.Route = RouteHTTPRoute }, "--gateway NAMESPACE/NAME is required with --route httproute"},
		{"httproute with ingress class", func(c *Config) {
			c.Route, c.Gateway, c.IngressClass = RouteHTTPRoute, GatewayRef{Namespace: "gw", Name: "traefik"}, "nginx"
		}, "--ingress-class nginx applies to --route ingress only"},
		{"gateway with ingress", func(c *Config) { c.Gateway = GatewayRef{Namespace: "gw", Name: "traefik"} }, "--gateway gw/traefik applies to --route httproute only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
