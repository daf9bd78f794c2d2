package kubeproxy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestArgs(t *testing.T) {
	cfg := Config{Mode: ModeNFTables, MinSyncPeriod: 4 * time.Second, Kubeconfig: "/d/kubeconfig", NodeName: "node-0",
		ClusterCIDR: "10.244.0.0/16", NodePortAddress: "10.244.0.1"}
	got := Args(cfg, 1001, 1002)
	for _, want := range []string{"--proxy-mode=nftables", "--kubeconfig=/d/kubeconfig", "--hostname-override=node-0",
		"--cluster-cidr=10.244.0.0/16", "--nodeport-addresses=10.244.0.1/32",
		"--healthz-bind-address=127.0.0.1:1001", "--metrics-bind-address=127.0.0.1:1002",
		// minSyncPeriod is set through the iptables flag in nftables mode
		// too (cmd/kube-proxy/app/options.go, processV1Alpha1Flags).
		"--iptables-min-sync-period=4s",
		// The machine's conntrack settings stay as they are.
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--conntrack-udp-timeout=0", "--conntrack-udp-timeout-stream=0"} {
		if !slices.Contains(got, want) {
			t.Errorf("args %q lack %q", got, want)
		}
	}
	cfg.MinSyncPeriod = 0
	for _, a := range Args(cfg, 1, 2) {
		if strings.HasPrefix(a, "--iptables-min-sync-period") {
			t.Errorf("period 0 passes %q; want kube-proxy's default", a)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: ModeNFTables}, ""},
		{Config{Mode: ModeIPTables, MinSyncPeriod: time.Second}, ""},
		{Config{Mode: "ipvs"}, `proxy mode "ipvs"`},
		{Config{Mode: ModeNone}, `proxy mode "none"`},
		{Config{Mode: ModeNFTables, MinSyncPeriod: -time.Second}, "must not be negative"},
	} {
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// An iptables-nft table that iptables made and kube-proxy's cleanup
// emptied holds chains with policies only; one with a rule is someone's.
func TestHasRule(t *testing.T) {
	empty := `table ip filter {
	chain INPUT {
		type filter hook input priority filter; policy accept;
	}
	chain FORWARD {
		type filter hook forward priority filter; policy accept;
	}
}`
	if hasRule(empty) {
		t.Errorf("empty table read as holding a rule")
	}
	withRule := strings.Replace(empty, "policy accept;\n\t}", "policy accept;\n\t\tip saddr 10.0.0.1 drop\n\t}", 1)
	if !hasRule(withRule) {
		t.Errorf("table with a rule read as empty:\n%s", withRule)
	}
}
