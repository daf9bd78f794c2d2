// Package kubeproxy runs the local cluster's one kube-proxy: the unmodified
// k8s.io/kubernetes/cmd/kube-proxy/app of the module's Kubernetes version,
// in a child process of epwindow-local (the same binary, started with Arg),
// so its global state — flags, feature gates, metrics, klog — is its own.
//
// The local cluster's nodes share this machine's root network namespace,
// so one kube-proxy programs the Service rules for all of them, as the one
// on each node of a real cluster does for that node.
//
// Its rules live only in kube-proxy's own tables (nftables: table "ip
// kube-proxy" and "ip6 kube-proxy"; iptables: the KUBE-* chains and the jumps
// to them). Stop removes them with kube-proxy's own cleanup (--cleanup), and
// a start after a crash does the same, guided by a marker file; a machine
// whose kube-proxy state is not ours (a real Kubernetes node) is refused.
package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/epwindow/epwindow/deploy/local/internal/child"
	"github.com/epwindow/epwindow/deploy/local/internal/freeport"
)

// Arg is the first argument that makes epwindow-local run kube-proxy.
const Arg = "kube-proxy"

// Modes are the --proxy-mode values; ModeNone runs no kube-proxy.
const (
	ModeNFTables = "nftables"
	ModeIPTables = "iptables"
	ModeNone     = "none"
)

// Marker says that this machine's kube-proxy state was made by
// epwindow-local (it holds the mode); it is written before kube-proxy
// starts and removed after its rules are gone.
const Marker = "/run/epwindow-local-kube-proxy"

// Config says how to run kube-proxy.
type Config struct {
	// Mode is ModeNFTables or ModeIPTables.
	Mode string
	// MinSyncPeriod is kube-proxy's minSyncPeriod (its
	// --iptables-min-sync-period flag, which sets it in nftables mode
	// too): the least time between two syncs of the rules. 0 = kube-proxy's
	// default (1s).
	MinSyncPeriod time.Duration
	// Kubeconfig is the credential kube-proxy reads the API with.
	Kubeconfig string
	// NodeName is the Node kube-proxy serves (--hostname-override).
	NodeName string
	// ClusterCIDR is the pod range (--cluster-cidr): traffic to a ClusterIP
	// from outside it is masqueraded.
	ClusterCIDR string
	// NodePortAddress is the one local address NodePorts open on (the
	// bridge's host address): kube-proxy's default is every local address,
	// the machine's own network included.
	NodePortAddress string
	// LogFile receives kube-proxy's output.
	LogFile string
}

// Proxy is a running kube-proxy child process.
type Proxy struct {
	// MetricsURL is kube-proxy's /metrics on loopback.
	MetricsURL string

	cfg Config
	*child.Process
}

// Args are kube-proxy's flags for cfg on the given loopback ports. Besides
// the mode and the sync period they keep it from touching what is not its
// own: every conntrack sysctl is left as it is (0 = leave alone,
// cmd/kube-proxy/app/options.go), its health and metrics servers listen
// on loopback only, and NodePorts open on the pod bridge's host address
// only.
func Args(cfg Config, healthzPort, metricsPort int) []string {
	args := []string{
		"--proxy-mode=" + cfg.Mode,
		"--kubeconfig=" + cfg.Kubeconfig,
		"--hostname-override=" + cfg.NodeName,
		"--cluster-cidr=" + cfg.ClusterCIDR,
		"--nodeport-addresses=" + cfg.NodePortAddress + "/32",
		"--healthz-bind-address=127.0.0.1:" + strconv.Itoa(healthzPort),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--conntrack-udp-timeout=0",
		"--conntrack-udp-timeout-stream=0",
	}
	if cfg.MinSyncPeriod > 0 {
		args = append(args, "--iptables-min-sync-period="+cfg.MinSyncPeriod.String())
	}
	return args
}

// Validate checks the mode and the period.
func (c Config) Validate() error {
	if c.Mode != ModeNFTables && c.Mode != ModeIPTables {
		return fmt.Errorf("proxy mode %q: want %s, %s or %s", c.Mode, ModeNFTables, ModeIPTables, ModeNone)
	}
	if c.MinSyncPeriod < 0 {
		return fmt.Errorf("min sync period (%s) must not be negative", c.MinSyncPeriod)
	}
	return nil
}

// Start runs kube-proxy and returns once its health server says it has
// programmed the rules once. It first removes what a crashed run's
// kube-proxy left (CleanupStale) and refuses rules that are not ours.
func Start(ctx context.Context, cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkBridgeNetfilter(); err != nil {
		return nil, err
	}
	if err := CleanupStale(ctx); err != nil {
		return nil, err
	}
	if err := refuseForeign(ctx); err != nil {
		return nil, err
	}
	// The marker holds the mode and the nftables tables there were before:
	// iptables mode (iptables-nft) creates the ip/ip6 filter, nat and mangle
	// tables on first use, and they go again when they were not there.
	before, err := nftTables(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(Marker, []byte(cfg.Mode+"\n"+strings.Join(before, "\n")+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", Marker, err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		p, err := start(ctx, cfg)
		if err == nil {
			return p, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	// Nothing may stay behind a failed start.
	return nil, errors.Join(lastErr, Cleanup(context.WithoutCancel(ctx), cfg.Mode))
}

func start(ctx context.Context, cfg Config) (*Proxy, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := freeport.Loopback(2)
	if err != nil {
		return nil, err
	}
	proc, err := child.Launch(self, append([]string{Arg}, Args(cfg, ports[0], ports[1])...), cfg.LogFile)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1]),
		cfg:        cfg,
		Process:    proc,
	}
	// kube-proxy's /healthz answers 200 only once the proxier has synced
	// the rules (ProxyHealthServer, pkg/proxy/healthcheck/proxy_health.go).
	healthz, client := fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[0]), &http.Client{Timeout: time.Second}
	if err := proc.WaitReady(ctx, "kube-proxy", "kube-proxy.log", 100*time.Millisecond, time.Minute, func() bool {
		return child.HTTPOK(ctx, client, healthz)
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// bridgeNetfilter is the sysctl that passes bridged IPv4 packets through
// netfilter. Pods of one node share a subnet and answer each other over the
// bridge without routing; only with it does conntrack see that answer and
// undo kube-proxy's DNAT, as on any bridge-based cluster.
const bridgeNetfilter = "/proc/sys/net/bridge/bridge-nf-call-iptables"

func checkBridgeNetfilter() error {
	b, err := os.ReadFile(bridgeNetfilter)
	if err != nil || strings.TrimSpace(string(b)) != "1" {
		return fmt.Errorf("kube-proxy needs bridged traffic to pass netfilter (%s = 1; modprobe br_netfilter and sysctl -w net.bridge.bridge-nf-call-iptables=1), or run with --proxy-mode none: %q %v",
			bridgeNetfilter, strings.TrimSpace(string(b)), err)
	}
	return nil
}

// Stop ends kube-proxy and removes its rules.
func (p *Proxy) Stop() error {
	p.Process.Stop()
	return Cleanup(context.Background(), p.cfg.Mode)
}

// Cleanup removes kube-proxy's rules with kube-proxy's own --cleanup (it
// deletes its nftables tables and its iptables chains and jumps:
// cmd/kube-proxy/app/server_linux.go platformCleanup), then what that leaves
// in iptables mode (its KUBE-FIREWALL chain, and the iptables-nft tables it
// made), checks that nothing is left and removes the marker.
func Cleanup(ctx context.Context, mode string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cleanup := exec.CommandContext(ctx, self, Arg, "--cleanup", "--proxy-mode="+mode)
	cleanup.Env = child.Env()
	out, runErr := cleanup.CombinedOutput()
	err = removeKubeChains(ctx)
	if b, rerr := os.ReadFile(Marker); rerr == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		err = errors.Join(err, removeNewEmptyTables(ctx, lines[1:]))
	}
	if err != nil {
		return err
	}
	left, err := Leftovers(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("kube-proxy's rules are still there after its --cleanup (%v): %s\n%s", runErr, strings.Join(left, ", "), lastLines(out, 10))
	}
	if err := os.Remove(Marker); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removeKubeChains deletes every jump to a KUBE-* chain from the other
// chains, then the KUBE-* chains, in each table of iptables and ip6tables.
func removeKubeChains(ctx context.Context) error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		save, err := exec.LookPath(bin + "-save")
		if err != nil {
			continue
		}
		out, err := exec.CommandContext(ctx, save).Output()
		if err != nil {
			return fmt.Errorf("%s-save: %w", bin, err)
		}
		var table string
		var jumps [][]string
		chains := map[string][]string{}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case strings.HasPrefix(line, "*"):
				table = line[1:]
			case strings.HasPrefix(line, ":KUBE-"):
				chains[table] = append(chains[table], f[0][1:])
			case len(f) > 1 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, "KUBE-") }):
				jumps = append(jumps, append([]string{"-t", table, "-D"}, f[1:]...))
			}
		}
		for _, j := range jumps {
			errs = append(errs, run(ctx, bin, j...))
		}
		for t, cs := range chains {
			for _, c := range cs {
				errs = append(errs, run(ctx, bin, "-t", t, "-F", c))
			}
			for _, c := range cs {
				errs = append(errs, run(ctx, bin, "-t", t, "-X", c))
			}
		}
	}
	return errors.Join(errs...)
}

// removeNewEmptyTables deletes the nftables tables that were not there
// before kube-proxy started and hold no rule now.
func removeNewEmptyTables(ctx context.Context, before []string) error {
	now, err := nftTables(ctx)
	if err != nil || len(now) == 0 {
		return err
	}
	var errs []error
	for _, t := range now {
		if slices.Contains(before, t) {
			continue
		}
		fam, name, _ := strings.Cut(t, " ")
		out, err := exec.CommandContext(ctx, "nft", "list", "table", fam, name).Output()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if hasRule(string(out)) {
			continue
		}
		errs = append(errs, run(ctx, "nft", "delete", "table", fam, name))
	}
	return errors.Join(errs...)
}

// hasRule tells whether an nft listing of one table holds a rule: a line
// in a chain that is neither its type/hook line, its policy, nor braces.
func hasRule(listing string) bool {
	for _, line := range strings.Split(listing, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case l == "", l == "}", strings.HasPrefix(l, "table "), strings.HasPrefix(l, "chain "), strings.HasPrefix(l, "type "), strings.HasPrefix(l, "policy "):
		default:
			return true
		}
	}
	return false
}

// nftTables lists "family name" of every nftables table; none without nft.
func nftTables(ctx context.Context) ([]string, error) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		return nil, nil
	}
	out, err := exec.CommandContext(ctx, nft, "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	var ts []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			ts = append(ts, f[1]+" "+f[2])
		}
	}
	return ts, nil
}

func run(ctx context.Context, name string, args ...string) error {
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// CleanupStale removes a crashed run's kube-proxy rules, found by the
// marker; without it there is nothing of ours to remove. epwindow-local
// runs it at every start, whatever the new run's proxy mode.
func CleanupStale(ctx context.Context) error {
	b, err := os.ReadFile(Marker)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	mode, _, _ := strings.Cut(string(b), "\n")
	if mode != ModeIPTables {
		mode = ModeNFTables
	}
	return Cleanup(ctx, mode)
}

// refuseForeign fails when the machine has kube-proxy rules that are not
// ours (no marker: CleanupStale ran first): kube-proxy would take them over.
func refuseForeign(ctx context.Context) error {
	left, err := Leftovers(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("this machine already has kube-proxy rules that epwindow-local did not make (%s): is it a Kubernetes node? Run with --proxy-mode none", strings.Join(left, ", "))
	}
	return nil
}

// Leftovers lists the kube-proxy state on this machine: its nftables
// tables and its iptables chains (the KUBE-* chains of the nat and filter
// tables). A missing nft or iptables binary means none of that kind.
func Leftovers(ctx context.Context) ([]string, error) {
	var left []string
	tables, err := nftTables(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if strings.HasSuffix(t, " kube-proxy") {
			left = append(left, "nft table "+t)
		}
	}
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			continue
		}
		out, err := exec.CommandContext(ctx, path).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, ":KUBE-") {
				left = append(left, bin+" chain "+strings.Fields(line[1:])[0])
			}
		}
	}
	return left, nil
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
