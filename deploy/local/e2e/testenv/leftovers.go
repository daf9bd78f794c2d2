package testenv

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/epwindow/epwindow/deploy/local/kubeproxy"
)

// NetPrefix is the node agent's default name prefix: its network
// namespaces and links are named NetPrefix + "-…".
const NetPrefix = "epw"

// unreachableMetric is the metric the node agent gives its unreachable
// route for NetPrefix (nodeagent/network.go, routeMetric: FNV-32a of the
// prefix mod 50000 + 10000), which tells it apart from other prefixes'.
func unreachableMetric() string {
	h := fnv.New32a()
	h.Write([]byte(NetPrefix))
	return strconv.Itoa(int(h.Sum32()%50000) + 10000)
}

// Leftovers lists what a torn-down cluster must not leave on the machine:
// network namespaces and links named NetPrefix-*, routes through those links
// and the agent's unreachable route, processes whose command line contains
// one of marks, and the state files `up` made in dir (logs may stay).
func Leftovers(ctx context.Context, dir string, marks ...string) ([]string, error) {
	var out []string
	nss, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, ns := range nss {
		if strings.HasPrefix(ns.Name(), NetPrefix+"-") {
			out = append(out, "netns "+ns.Name())
		}
	}
	links, err := exec.CommandContext(ctx, "ip", "-o", "link", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("ip link show: %w", err)
	}
	for _, l := range strings.Split(string(links), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], NetPrefix+"-") {
			out = append(out, "link "+strings.TrimSuffix(f[1], ":"))
		}
	}
	routes, err := exec.CommandContext(ctx, "ip", "-o", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route show: %w", err)
	}
	for _, r := range strings.Split(string(routes), "\n") {
		f := strings.Fields(r)
		ours := strings.Contains(r, " dev "+NetPrefix+"-")
		for i := 0; i+1 < len(f); i++ {
			if f[0] == "unreachable" && f[i] == "metric" && f[i+1] == unreachableMetric() {
				ours = true
			}
		}
		if ours {
			out = append(out, "route "+r)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		if strings.Split(p, "/")[2] == self {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		for _, m := range marks {
			if strings.Contains(cmd, m) {
				out = append(out, fmt.Sprintf("process %s: %s", strings.Split(p, "/")[2], cmd))
			}
		}
	}
	kp, err := KubeProxyLeftovers(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, kp...)
	for _, n := range []string{"etcd", "pki", "kubeconfig", "kubeconfig-restricted", "nodes"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			out = append(out, "file "+filepath.Join(dir, n))
		}
	}
	return out, nil
}

// KubeProxyLeftovers lists kube-proxy's state on the machine: its nftables
// tables, iptables chains named KUBE-*, and epwindow-local's marker of a
// running kube-proxy (kubeproxy.Marker). It reads the tables itself rather
// than through kubeproxy.Leftovers: the check of the cleanup must not share
// the cleanup's own reading.
func KubeProxyLeftovers(ctx context.Context) ([]string, error) {
	var out []string
	if tables, err := exec.CommandContext(ctx, "nft", "list", "tables").Output(); err == nil {
		for _, l := range strings.Split(string(tables), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[2] == "kube-proxy" {
				out = append(out, "nft "+l)
			}
		}
	} else if _, lookErr := exec.LookPath("nft"); lookErr == nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(save); err != nil {
			continue
		}
		rules, err := exec.CommandContext(ctx, save).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", save, err)
		}
		for _, l := range strings.Split(string(rules), "\n") {
			if strings.HasPrefix(l, ":KUBE-") || strings.Contains(l, "-j KUBE-") {
				out = append(out, save+": "+l)
			}
		}
	}
	if _, err := os.Stat(kubeproxy.Marker); err == nil {
		out = append(out, "file "+kubeproxy.Marker)
	}
	return out, nil
}
