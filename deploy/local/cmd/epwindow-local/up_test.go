package main

import (
	"bytes"
	"errors"
	"flag"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseUp(t *testing.T) {
	c, err := parseUp([]string{"--dir", "x", "--bin-dir", "/b"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(c.Dir, "/x") || c.Nodes != 2 || c.IngressPoll != 3*time.Second || c.ProxyMode != "nftables" || c.ProxySync != 0 ||
		c.Ingress != "skipper" || !c.skipper() || c.traefik() || c.Throttle != 2*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	c, err = parseUp([]string{"--dir", "/d", "--bin-dir", "/b", "--proxy-mode", "iptables", "--proxy-min-sync-period", "4s", "--nodes", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ProxyMode != "iptables" || c.ProxySync != 4*time.Second || c.Nodes != 3 {
		t.Errorf("set: %+v", c)
	}
	c, err = parseUp([]string{"--dir", "/d", "--bin-dir", "/b", "--max-endpoints-per-slice", "5", "--ballast", "2000x5", "--churn", "2"})
	if err != nil || c.MaxPerSlice != 5 || c.Ballast != (ballastSpec{2000, 5}) || c.Churn != 2 {
		t.Errorf("production shape: %+v, %v", c, err)
	}
	for _, tt := range []struct {
		ingress          string
		skipper, traefik bool
	}{{"skipper", true, false}, {"traefik", false, true}, {"all", true, true}} {
		c, err := parseUp([]string{"--dir", "/d", "--bin-dir", "/b", "--ingress", tt.ingress, "--traefik-throttle", "500ms"})
		if err != nil {
			t.Fatal(err)
		}
		if c.skipper() != tt.skipper || c.traefik() != tt.traefik || c.Throttle != 500*time.Millisecond {
			t.Errorf("--ingress %s: skipper %v traefik %v throttle %s", tt.ingress, c.skipper(), c.traefik(), c.Throttle)
		}
	}
	if clusterDNS(c) != nil {
		t.Errorf("cluster DNS without --dns: %v, want pods on the machine's resolv.conf", clusterDNS(c))
	}
	c, err = parseUp([]string{"--dir", "/d", "--bin-dir", "/b", "--dns", "--dns-ttl", "5s", "--dns-cache", "0s", "--dns-cache-cluster"})
	if err != nil || !c.DNS || c.DNSTTL != 5*time.Second || c.DNSCache != 0 || !c.DNSCacheCluster {
		t.Errorf("--dns: %+v, %v", c, err)
	}
	if h, err := parseUp([]string{"--dir", "/d", "--bin-dir", "/b", "--dns", "--haproxy", "--haproxy-resolve", "3s"}); err != nil || !h.HAProxy || h.HAProxyResolve != 3*time.Second {
		t.Errorf("--haproxy: %+v, %v", h, err)
	}
	if h, _ := parseUp([]string{"--dir", "/d", "--bin-dir", "/b"}); h.Volumes != 2 {
		t.Errorf("default --volumes %d, want 2 (a schedule's history and one more)", h.Volumes)
	}
	if h, _ := parseUp([]string{"--dir", "/d", "--bin-dir", "/b"}); h.HAProxy || h.HAProxyResolve != time.Second {
		t.Errorf("defaults: HAProxy %v, resolve %s; want off and HAProxy's 1s", h.HAProxy, h.HAProxyResolve)
	}
	if got := clusterDNS(c); len(got) != 1 || got[0].String() != "10.96.0.10" {
		t.Errorf("cluster DNS with --dns: %v, want kube-dns's 10.96.0.10", got)
	}
	if got := serviceCIDR(c); got != "10.96.0.0/16" {
		t.Errorf("service CIDR with kube-proxy: %q", got)
	}
	c.ProxyMode = "none"
	if got := serviceCIDR(c); got != "" {
		t.Errorf("service CIDR without kube-proxy: %q, want none routed", got)
	}
}

// Bad values fail before anything starts, naming the flag.
func TestParseUpRejects(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--dir"},
		{[]string{"--dir", "/d", "--proxy-mode", "ipvs"}, "--proxy-mode"},
		{[]string{"--dir", "/d", "--proxy-min-sync-period", "-1s"}, "--proxy-min-sync-period"},
		{[]string{"--dir", "/d", "--proxy-mode", "none", "--proxy-min-sync-period", "2s"}, "--proxy-min-sync-period"},
		{[]string{"--dir", "/d", "--nodes", "0"}, "--nodes"},
		{[]string{"--dir", "/d", "--ingress-poll", "1ms"}, "--ingress-poll"},
		{[]string{"--dir", "/d", "--batch-period", "-1s"}, "--batch-period"},
		{[]string{"--dir", "/d", "extra"}, "unexpected"},
		{[]string{"--dir", "/d", "--ingress", "nginx"}, "--ingress"},
		{[]string{"--dir", "/d", "--traefik-throttle", "-1s"}, "--traefik-throttle"},
		{[]string{"--dir", "/d", "--max-endpoints-per-slice", "1001"}, "--max-endpoints-per-slice"},
		{[]string{"--dir", "/d", "--max-endpoints-per-slice", "-1"}, "--max-endpoints-per-slice"},
		{[]string{"--dir", "/d", "--ballast", "2000y5"}, "--ballast"},
		{[]string{"--dir", "/d", "--churn", "5"}, "--churn needs --ballast"},
		{[]string{"--dir", "/d", "--ballast", "10", "--churn", "1000"}, "--churn"},
		{[]string{"--dir", "/d", "--dns", "--proxy-mode", "none"}, "--dns needs a kube-proxy"},
		{[]string{"--dir", "/d", "--dns", "--dns-ttl", "-1s"}, "--dns-ttl"},
		{[]string{"--dir", "/d", "--dns", "--dns-cache", "2h"}, "--dns-cache"},
		{[]string{"--dir", "/d", "--haproxy"}, "--haproxy needs --dns"},
		{[]string{"--dir", "/d", "--dns", "--haproxy", "--haproxy-resolve", "0s"}, "--haproxy-resolve"},
		{[]string{"--dir", "/d", "--volumes", "-1"}, "--volumes"},
		{[]string{"--dir", "/d", "--volumes", "101"}, "--volumes"},
	} {
		_, err := parseUp(append(tt.args, "--bin-dir", "/b"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one naming %s", tt.args, err, tt.want)
		}
	}
}

// Every flag up defines is in `up --help`, with its default when it has one
// (a switch's false and an empty text are none: the meaning says).
func TestUpHelpShowsEveryFlag(t *testing.T) {
	var help bytes.Buffer
	upHelp(&help)
	n := 0
	upFlags(&upConfig{}, new(string)).VisitAll(func(f *flag.Flag) {
		n++
		entry := regexp.MustCompile(`(?m)^  --` + regexp.QuoteMeta(f.Name) + `( .*)?\n(      .*\n)+`).FindString(help.String())
		if entry == "" {
			t.Errorf("--%s is not in the help:\n%s", f.Name, help.String())
			return
		}
		if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(entry, "(default "+f.DefValue+")") {
			t.Errorf("--%s: %q does not give its default %s", f.Name, entry, f.DefValue)
		}
	})
	if n < 20 {
		t.Errorf("only %d flags defined", n)
	}
	example := regexp.MustCompile(`(?m)^\s*epwindow-local up (--dir .*)$`).FindStringSubmatch(help.String())
	if example == nil {
		t.Fatalf("no example in the help:\n%s", help.String())
	}
	if _, err := parseUp(append(strings.Fields(example[1]), "--bin-dir", "/b")); err != nil {
		t.Errorf("the help's example %q: %v", example[0], err)
	}
	if _, err := parseUp([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp (main prints the help, exit 0)", err)
	}
}
