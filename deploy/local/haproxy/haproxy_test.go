package haproxy

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func testConfig() Config {
	return Config{Nameserver: netip.MustParseAddrPort("10.244.0.1:53"), Name: "dnsprobe.epwindow-dns.svc.cluster.local",
		Port: 8080, Slots: 6, ResolveEvery: 3 * time.Second}
}

func TestFile(t *testing.T) {
	f := File(testConfig(), 18080, "/run/x/haproxy.sock")
	for _, want := range []string{
		"stats socket /run/x/haproxy.sock mode 600 level admin",
		"nameserver coredns 10.244.0.1:53",
		"timeout resolve 3000ms",
		"bind 127.0.0.1:18080",
		"server-template srv 6 dnsprobe.epwindow-dns.svc.cluster.local:8080 resolvers coredns init-addr none",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, f)
		}
	}
	// One nameserver only, on the pod network: nothing resolves elsewhere.
	if strings.Count(f, "nameserver") != 1 || strings.Contains(f, "parse-resolv-conf") {
		t.Errorf("haproxy.cfg may ask another resolver:\n%s", f)
	}
}

func TestValidate(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Config){
		"no nameserver": func(c *Config) { c.Nameserver = netip.AddrPort{} },
		"no name":       func(c *Config) { c.Name = "" },
		"bad port":      func(c *Config) { c.Port = 0 },
		"no slots":      func(c *Config) { c.Slots = 0 },
		"zero resolve":  func(c *Config) { c.ResolveEvery = 0 },
	} {
		c := testConfig()
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("%s: valid", name)
		}
	}
}
