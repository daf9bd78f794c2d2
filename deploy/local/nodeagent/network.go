package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/epwindow/epwindow/deploy/local/internal/child"
)

// routeProto marks the agent's unreachable route ("proto 101" in ip route);
// with routeMetric it lets CleanupStale find the route of one prefix
// without knowing the pod CIDR.
const routeProto = "101"

// routeMetric is the metric of the prefix's unreachable route, derived from
// the prefix so that agents with different prefixes never remove each
// other's route.
func routeMetric(prefix string) string {
	h := fnv.New32a()
	h.Write([]byte(prefix))
	return strconv.Itoa(int(h.Sum32()%50000) + 10000)
}

// netnsDir is where iproute2 (and the agent) keep named network namespaces.
const netnsDir = "/run/netns"

// cniVersion is the CNI spec version of the configs the agent writes; Debian
// 12's plugins (1.1.1) support it.
const cniVersion = "1.0.0"

// SetupNetwork prepares the root network namespace before any pod starts:
// first an unreachable route for the whole pod CIDR (so no pod-bound packet
// can ever leave the machine), then the bridge with node i's gateway
// 10.244.i.1/24, and the CNI config files under StateDir. It starts from a
// clean CNI state (IPAM allocations of an earlier run are dropped).
func SetupNetwork(cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validateNetwork(); err != nil {
		return err
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cfg.CNIBinDir, p)); err != nil {
			return fmt.Errorf("CNI plugin %q missing in %s (install Debian's containernetworking-plugins or set the CNI bin dir): %w", p, cfg.CNIBinDir, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The unreachable route comes first: nothing else may exist without it.
	if err := ipCmd(ctx, "route", "replace", "unreachable", cfg.PodCIDR, "proto", routeProto, "metric", routeMetric(cfg.Prefix)); err != nil {
		return fmt.Errorf("install unreachable route for %s: %w", cfg.PodCIDR, err)
	}
	br := cfg.bridgeName()
	if _, err := os.Stat("/sys/class/net/" + br); err != nil {
		if err := ipCmd(ctx, "link", "add", br, "type", "bridge"); err != nil {
			return fmt.Errorf("create bridge %s: %w", br, err)
		}
	}
	if err := ipCmd(ctx, "link", "set", "dev", br, "address", bridgeMAC(cfg.Prefix).String()); err != nil {
		return fmt.Errorf("set bridge %s's MAC address: %w", br, err)
	}
	for i := range cfg.Nodes {
		sub, err := nodeSubnet(cfg.PodCIDR, i)
		if err != nil {
			return err
		}
		gw := netip.PrefixFrom(gateway(sub), 24)
		if err := ipCmd(ctx, "addr", "replace", gw.String(), "dev", br); err != nil {
			return fmt.Errorf("address bridge %s: %w", br, err)
		}
	}
	if err := ipCmd(ctx, "link", "set", br, "up"); err != nil {
		return fmt.Errorf("bring up bridge %s: %w", br, err)
	}
	if cfg.ServiceCIDR != "" {
		if err := routeServices(ctx, cfg); err != nil {
			return err
		}
	}
	dir := cniDir(cfg)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear CNI state: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create CNI state dir: %w", err)
	}
	for i, node := range cfg.Nodes {
		b, err := bridgeConfList(cfg, i)
		if err != nil {
			return err
		}
		if err := os.WriteFile(confListPath(cfg, node), b, 0o600); err != nil {
			return fmt.Errorf("write CNI config for node %s: %w", node, err)
		}
	}
	lo, err := json.MarshalIndent(map[string]any{
		"cniVersion": cniVersion,
		"name":       cfg.Prefix + "-lo",
		"plugins":    []any{map[string]any{"type": "loopback"}},
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(loConfListPath(cfg), lo, 0o600); err != nil {
		return fmt.Errorf("write loopback CNI config: %w", err)
	}
	return nil
}

// routeServices lets the bridge forward what it receives (IPv4 forwarding
// is decided by the receiving interface's own forwarding sysctl,
// IN_DEV_FORWARD in the kernel's ip_route_input_slow; the machine's
// ip_forward stays as it is, and the setting goes with the bridge) and
// routes the service range onto the bridge from node 0's gateway address:
// a connection from the root namespace to a ClusterIP needs a route before
// kube-proxy's DNAT in the output hook rewrites it, and one kube-proxy does
// not rewrite must not leave the machine.
func routeServices(ctx context.Context, cfg Config) error {
	br := cfg.bridgeName()
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+br+"/forwarding", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("let bridge %s forward: %w", br, err)
	}
	sub, err := nodeSubnet(cfg.PodCIDR, 0)
	if err != nil {
		return err
	}
	if err := ipCmd(ctx, "route", "replace", cfg.ServiceCIDR, "dev", br, "src", gateway(sub).String(), "proto", routeProto); err != nil {
		return fmt.Errorf("route service CIDR %s onto bridge %s: %w", cfg.ServiceCIDR, br, err)
	}
	return nil
}

// bridgeMAC is the bridge's own MAC address, set once so that it never
// changes. A bridge whose address was not set takes the lowest MAC of its
// ports, again whenever a port is added, removed or goes down
// (br_stp_recalculate_bridge_id in the kernel's net/bridge/br_stp_if.c,
// which returns early only for addr_assign_type NET_ADDR_SET). Every pod's
// veth has a random MAC, so a pod's start could move the gateway's MAC
// under all the others: their ARP entries for it went on naming the old one
// until they aged out (15-45 s: base_reachable_time_ms 30000, randomised
// ×0.5-1.5, then the kernel's 5 s delay before it probes), and every
// packet a pod sent off its subnet (its readiness replies to the node
// agent, its answers to a ClusterIP client or an ingress) was lost. It is
// locally administered (0x02) and derived from the prefix, so two agents
// with different prefixes differ.
func bridgeMAC(prefix string) net.HardwareAddr {
	h := fnv.New64a()
	h.Write([]byte(prefix))
	sum := h.Sum(nil)
	return net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}
}

// bridgeConfList is node i's CNI network: a port on the shared bridge and an
// address from host-local in the node's /24, with isGateway false (the
// agent addresses the bridge itself; the plugin leaves ip_forward alone).
// Without a service CIDR there are no routes: the pod reaches only its
// subnet. With one, the pod CIDR and the service CIDR are routed through
// the node's gateway, as a real cluster's pod network does.
func bridgeConfList(cfg Config, i int) ([]byte, error) {
	sub, err := nodeSubnet(cfg.PodCIDR, i)
	if err != nil {
		return nil, err
	}
	ipam := map[string]any{
		"type":    "host-local",
		"dataDir": filepath.Join(cniDir(cfg), "ipam"),
		"ranges": [][]map[string]string{{{
			"subnet":  sub.String(),
			"gateway": gateway(sub).String(),
		}}},
	}
	if cfg.ServiceCIDR != "" {
		gw := gateway(sub).String()
		ipam["routes"] = []map[string]string{{"dst": cfg.PodCIDR, "gw": gw}, {"dst": cfg.ServiceCIDR, "gw": gw}}
	}
	return json.MarshalIndent(map[string]any{
		"cniVersion": cniVersion,
		"name":       cfg.Prefix + "-" + cfg.Nodes[i],
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      cfg.bridgeName(),
			"isGateway":   false,
			"ipMasq":      false,
			"hairpinMode": false,
			"ipam":        ipam,
		}},
	}, "", "  ")
}

func cniDir(cfg Config) string { return filepath.Join(cfg.StateDir, "cni") }
func confListPath(cfg Config, node string) string {
	return filepath.Join(cniDir(cfg), node+".conflist")
}
func loConfListPath(cfg Config) string { return filepath.Join(cniDir(cfg), "lo.conflist") }

// TeardownNetwork removes everything SetupNetwork and the pods made: the
// pods' network namespaces (killing any process left in them), the bridge
// and veths, the unreachable route, and the CNI state under StateDir.
func TeardownNetwork(cfg Config) error {
	cfg = cfg.withDefaults()
	if !prefixPattern.MatchString(cfg.Prefix) {
		return fmt.Errorf("prefix %q must be 1-6 lowercase letters or digits, starting with a letter", cfg.Prefix)
	}
	err := CleanupStale(cfg.Prefix)
	if cfg.StateDir != "" {
		err = errors.Join(err, os.RemoveAll(cniDir(cfg)))
	}
	return err
}

// CleanupStale removes what an earlier agent with this prefix left behind
// after a crash, and nothing else: processes inside network namespaces named
// "<prefix>-*", those namespaces, links named "<prefix>-*", and unreachable
// routes carrying the agent's route protocol (101) and the prefix's metric.
func CleanupStale(prefix string) error {
	if !prefixPattern.MatchString(prefix) {
		return fmt.Errorf("prefix %q must be 1-6 lowercase letters or digits, starting with a letter", prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	nss, err := listNetns(prefix)
	if err != nil {
		errs = append(errs, err)
	}
	if len(nss) > 0 {
		killInNetns(nss)
	}
	for _, ns := range nss {
		if err := deleteNetns(ctx, filepath.Base(ns)); err != nil {
			errs = append(errs, err)
		}
	}
	links, err := listLinks(ctx, prefix)
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if err := ipCmd(ctx, "link", "delete", l); err != nil && linkExists(l) {
			errs = append(errs, fmt.Errorf("delete link %s: %w", l, err))
		}
	}
	routes, err := ourRoutes(ctx, prefix)
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range routes {
		if err := ipCmd(ctx, "route", "delete", "unreachable", r, "proto", routeProto, "metric", routeMetric(prefix)); err != nil {
			errs = append(errs, fmt.Errorf("delete route unreachable %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// ipCmd runs iproute2's ip with args.
func ipCmd(ctx context.Context, args ...string) error {
	_, err := ipOut(ctx, args...)
	return err
}

func ipOut(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Env = child.Env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("ip (iproute2) not found in PATH: %w", err)
		}
		return nil, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// listNetns returns the paths of the named network namespaces with prefix.
func listNetns(prefix string) ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", netnsDir, err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, filepath.Join(netnsDir, e.Name()))
		}
	}
	return out, nil
}

// listLinks returns the names of the root namespace's links with prefix.
func listLinks(ctx context.Context, prefix string) ([]string, error) {
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// ourRoutes returns the destinations of the prefix's unreachable routes.
func ourRoutes(ctx context.Context, prefix string) ([]string, error) {
	out, err := ipOut(ctx, "-j", "route", "show", "type", "unreachable", "proto", routeProto)
	if err != nil {
		return nil, err
	}
	var rs []struct {
		Dst    string `json:"dst"`
		Metric int    `json:"metric"`
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(out, &rs); err != nil {
		return nil, fmt.Errorf("parse ip route output: %w", err)
	}
	var dsts []string
	for _, r := range rs {
		if strconv.Itoa(r.Metric) == routeMetric(prefix) {
			dsts = append(dsts, r.Dst)
		}
	}
	return dsts, nil
}

// killInNetns SIGKILLs every process whose network namespace is one of nss.
func killInNetns(nss []string) {
	want := map[[2]uint64]bool{}
	for _, ns := range nss {
		var st syscall.Stat_t
		if err := syscall.Stat(ns, &st); err == nil {
			want[[2]uint64{st.Dev, st.Ino}] = true
		}
	}
	procs, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/proc", p.Name(), "ns", "net"), &st); err != nil {
			continue
		}
		if want[[2]uint64{st.Dev, st.Ino}] {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func createNetns(ctx context.Context, name string) (string, error) {
	if err := ipCmd(ctx, "netns", "add", name); err != nil {
		return "", fmt.Errorf("create network namespace: %w", err)
	}
	return filepath.Join(netnsDir, name), nil
}

func deleteNetns(ctx context.Context, name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := ipCmd(ctx, "netns", "delete", name); err != nil {
		return fmt.Errorf("delete network namespace: %w", err)
	}
	return nil
}

// pluginExec runs the CNI plugins as libcni's default does, but with only
// the CNI_* variables libcni sets for the call and child.Env's PATH:
// libcni's default hands them this process's whole environment, the
// user's (invoke.Args.AsEnv, pkg/invoke/args.go).
type pluginExec struct{ *invoke.DefaultExec }

func (e pluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	return e.DefaultExec.ExecPlugin(ctx, pluginPath, stdinData, cniEnv(environ))
}

// cniEnv keeps the CNI_* variables of environ (CNI_COMMAND, CNI_NETNS, …:
// the plugin's arguments, SPEC.md "Parameters") on child.Env's PATH.
func cniEnv(environ []string) []string {
	var keep []string
	for _, kv := range environ {
		if strings.HasPrefix(kv, "CNI_") {
			keep = append(keep, kv)
		}
	}
	return child.Env(keep...)
}

// podNetwork runs the CNI plugins for the pods of one agent.
type podNetwork struct {
	cfg *libcni.CNIConfig
	c   Config
}

func newPodNetwork(cfg Config) *podNetwork {
	return &podNetwork{
		cfg: libcni.NewCNIConfigWithCacheDir([]string{cfg.CNIBinDir}, filepath.Join(cniDir(cfg), "cache"),
			pluginExec{&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}}}),
		c: cfg,
	}
}

func (n *podNetwork) lists(node string) (*libcni.NetworkConfigList, *libcni.NetworkConfigList, error) {
	br, err := libcni.NetworkConfFromFile(confListPath(n.c, node))
	if err != nil {
		return nil, nil, fmt.Errorf("load CNI config of node %s (did SetupNetwork run?): %w", node, err)
	}
	lo, err := libcni.NetworkConfFromFile(loConfListPath(n.c))
	if err != nil {
		return nil, nil, fmt.Errorf("load loopback CNI config: %w", err)
	}
	return br, lo, nil
}

func (n *podNetwork) runtimeConf(uid, nsPath string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: uid, NetNS: nsPath, IfName: "eth0"}
}

// add creates the pod's namespace, runs CNI ADD (loopback, then the node's
// bridge network) and names the host-side veth "<prefix>-<uid[:8]>".
// It returns the namespace path and the pod's address.
func (n *podNetwork) add(ctx context.Context, node, uid string) (string, netip.Addr, error) {
	br, lo, err := n.lists(node)
	if err != nil {
		return "", netip.Addr{}, err
	}
	nsPath, err := createNetns(ctx, n.c.netnsName(uid))
	if err != nil {
		return "", netip.Addr{}, err
	}
	rt := n.runtimeConf(uid, nsPath)
	if _, err := n.cfg.AddNetworkList(ctx, lo, &libcni.RuntimeConf{ContainerID: uid, NetNS: nsPath, IfName: "lo"}); err != nil {
		return nsPath, netip.Addr{}, fmt.Errorf("CNI ADD loopback: %w", err)
	}
	res, err := n.cfg.AddNetworkList(ctx, br, rt)
	if err != nil {
		return nsPath, netip.Addr{}, fmt.Errorf("CNI ADD %s: %w", br.Name, err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nsPath, netip.Addr{}, fmt.Errorf("CNI ADD %s result: %w", br.Name, err)
	}
	var ip netip.Addr
	for _, c := range r.IPs {
		if a, ok := netip.AddrFromSlice(c.Address.IP); ok && a.Unmap().Is4() {
			ip = a.Unmap()
			break
		}
	}
	if !ip.IsValid() {
		return nsPath, netip.Addr{}, fmt.Errorf("CNI ADD %s returned no IPv4 address: %v", br.Name, r.IPs)
	}
	for _, itf := range r.Interfaces {
		if itf.Sandbox == "" && itf.Name != n.c.bridgeName() && !strings.HasPrefix(itf.Name, n.c.Prefix+"-") {
			if err := n.renameVeth(ctx, itf.Name, vethName(n.c.Prefix, uid)); err != nil {
				return nsPath, ip, err
			}
		}
	}
	return nsPath, ip, nil
}

// renameVeth gives the plugin's host-side veth the agent's prefix, so that
// every link the agent causes is found by name at teardown.
func (n *podNetwork) renameVeth(ctx context.Context, from, to string) error {
	if err := ipCmd(ctx, "link", "set", "dev", from, "down"); err != nil {
		return fmt.Errorf("rename veth: %w", err)
	}
	if err := ipCmd(ctx, "link", "set", "dev", from, "name", to); err != nil {
		return fmt.Errorf("rename veth: %w", err)
	}
	if err := ipCmd(ctx, "link", "set", "dev", to, "up"); err != nil {
		return fmt.Errorf("rename veth: %w", err)
	}
	return nil
}

// vethName is the host-side veth of a pod: prefix, "-", 8 characters of the
// UID (at most 15 bytes, the kernel's limit).
func vethName(prefix, uid string) string {
	s := strings.ReplaceAll(uid, "-", "")
	if len(s) > 8 {
		s = s[:8]
	}
	return prefix + "-" + s
}

// del runs CNI DEL (bridge network, then loopback) and deletes the pod's
// namespace; the veth pair goes with it.
func (n *podNetwork) del(ctx context.Context, node, uid string) error {
	nsPath := filepath.Join(netnsDir, n.c.netnsName(uid))
	var errs []error
	br, lo, err := n.lists(node)
	if err != nil {
		errs = append(errs, err)
	} else {
		if err := n.cfg.DelNetworkList(ctx, br, n.runtimeConf(uid, nsPath)); err != nil {
			errs = append(errs, fmt.Errorf("CNI DEL %s: %w", br.Name, err))
		}
		if err := n.cfg.DelNetworkList(ctx, lo, &libcni.RuntimeConf{ContainerID: uid, NetNS: nsPath, IfName: "lo"}); err != nil {
			errs = append(errs, fmt.Errorf("CNI DEL loopback: %w", err))
		}
	}
	if err := deleteNetns(ctx, n.c.netnsName(uid)); err != nil {
		errs = append(errs, err)
	}
	if v := vethName(n.c.Prefix, uid); linkExists(v) {
		if err := ipCmd(ctx, "link", "delete", v); err != nil && linkExists(v) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
