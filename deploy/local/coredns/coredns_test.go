package coredns

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func config() Config {
	return Config{Listen: netip.MustParseAddr("10.244.0.1"), Domain: "cluster.local", Kubeconfig: "/d/kubeconfig-coredns",
		TTL: 30 * time.Second, Cache: 30 * time.Second}
}

// kubeadm's Corefile, bound to the pod-network address, with the cluster
// domain left out of the cache unless asked, and nothing that sends a
// query off the machine.
func TestCorefile(t *testing.T) {
	c := Corefile(config(), 1, 2, 3)
	for _, want := range []string{".:53 {", "bind 10.244.0.1", "health 127.0.0.1:1", "ready 127.0.0.1:2", "prometheus 127.0.0.1:3",
		"kubernetes cluster.local in-addr.arpa ip6.arpa {", "kubeconfig /d/kubeconfig-coredns", "ttl 30",
		"cache 30 {", "disable success cluster.local", "disable denial cluster.local"} {
		if !strings.Contains(c, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, c)
		}
	}
	for _, never := range []string{"forward", "loop", "0.0.0.0"} {
		if strings.Contains(c, never) {
			t.Errorf("Corefile has %q:\n%s", never, c)
		}
	}
	cfg := config()
	cfg.CacheCluster, cfg.TTL = true, 1500*time.Millisecond
	c = Corefile(cfg, 1, 2, 3)
	if strings.Contains(c, "disable") || !strings.Contains(c, "ttl 2") || !strings.Contains(c, "cache 30 {") {
		t.Errorf("cached cluster domain, TTL 1.5s rounded up:\n%s", c)
	}
	cfg.Cache = 0
	if c = Corefile(cfg, 1, 2, 3); strings.Contains(c, "cache") {
		t.Errorf("--dns-cache 0 keeps a cache plugin:\n%s", c)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"wildcard listen", func(c *Config) { c.Listen = netip.IPv4Unspecified() }, "listen address"},
		{"no listen", func(c *Config) { c.Listen = netip.Addr{} }, "listen address"},
		{"bad domain", func(c *Config) { c.Domain = "a b" }, "cluster domain"},
		{"negative TTL", func(c *Config) { c.TTL = -time.Second }, "--dns-ttl"},
		{"huge cache", func(c *Config) { c.Cache = 2 * time.Hour }, "--dns-cache"},
	} {
		cfg := config()
		tc.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	if err := config().Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
