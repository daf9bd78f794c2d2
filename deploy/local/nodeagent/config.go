package nodeagent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"

	"k8s.io/client-go/kubernetes"
)

// Defaults used by Config.withDefaults when a field is left empty.
const (
	DefaultPodCIDR   = "10.244.0.0/16"
	DefaultPrefix    = "epw"
	DefaultCNIBinDir = "/usr/lib/cni"
)

// Config is what the node agent needs to run. Client, Nodes, BinDir and
// StateDir are required; the rest have defaults.
type Config struct {
	// Client talks to the API server (nodes, leases, pods, pod status).
	Client kubernetes.Interface
	// Nodes are the names of the Node objects this agent registers and
	// serves; node i gets the pod subnet 10.244.i.0/24 of PodCIDR.
	Nodes []string
	// BinDir holds the binaries containers run (see the package doc).
	BinDir string
	// StateDir holds everything the agent writes: CNI config and IPAM
	// state, per-container logs and termination-message files.
	StateDir string
	// Log receives the agent's own log; nil discards it.
	Log *slog.Logger
	// PodCIDR is the pod address range (default 10.244.0.0/16); it must be
	// an IPv4 /16 so that every node gets a /24 of it.
	PodCIDR string
	// ServiceCIDR, when set, is the Services' ClusterIP range, routed for a
	// kube-proxy on this machine: pods get routes to it and to the whole
	// PodCIDR through their node's gateway on the bridge, the bridge
	// forwards (for packets it receives only: its own forwarding sysctl,
	// not the machine's ip_forward), and the root namespace routes the range
	// onto the bridge, so a ClusterIP that kube-proxy does not rewrite goes
	// nowhere but the bridge. Empty: pods reach only their own subnet.
	ServiceCIDR string
	// Prefix starts the name of everything the agent creates on the
	// machine: network namespaces, the bridge, veths (default "epw").
	Prefix string
	// CNIBinDir holds the CNI plugins bridge, host-local and loopback
	// (default /usr/lib/cni, Debian's containernetworking-plugins).
	CNIBinDir string
	// KubeletPort is the 127.0.0.1 port of the kubelet API (port-forward,
	// container logs) shared by all nodes; 0 picks a free one.
	KubeletPort int
	// ClusterDNS are the cluster DNS servers' addresses (the kubelet's
	// --cluster-dns): pods of dnsPolicy ClusterFirst get them in their
	// resolv.conf. Empty: every pod sees the machine's resolv.conf.
	ClusterDNS []netip.Addr
	// ClusterDomain is the cluster's DNS domain (--cluster-domain;
	// default DefaultClusterDomain).
	ClusterDomain string
	// ShimPath is the executable started for each container; it must call
	// ShimMain when argv[1] is ShimArg. Empty means os.Executable().
	ShimPath string
}

func (cfg Config) clusterDomain() string {
	if cfg.ClusterDomain == "" {
		return DefaultClusterDomain
	}
	return cfg.ClusterDomain
}

// prefixPattern keeps the prefix usable in interface names (15 bytes max
// with the suffixes the agent adds) and in file names.
var prefixPattern = regexp.MustCompile(`^[a-z][a-z0-9]{0,5}$`)

// withDefaults returns cfg with empty fields filled in.
func (cfg Config) withDefaults() Config {
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = DefaultPodCIDR
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.CNIBinDir == "" {
		cfg.CNIBinDir = DefaultCNIBinDir
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// validateNetwork checks the fields SetupNetwork and TeardownNetwork use.
func (cfg Config) validateNetwork() error {
	if !prefixPattern.MatchString(cfg.Prefix) {
		return fmt.Errorf("prefix %q must be 1-6 lowercase letters or digits, starting with a letter", cfg.Prefix)
	}
	p, err := netip.ParsePrefix(cfg.PodCIDR)
	if err != nil {
		return fmt.Errorf("pod CIDR %q: %w", cfg.PodCIDR, err)
	}
	if !p.Addr().Is4() || p.Bits() != 16 || p.Masked() != p {
		return fmt.Errorf("pod CIDR %q must be an IPv4 /16 network like 10.244.0.0/16", cfg.PodCIDR)
	}
	if p.Addr().IsLoopback() || !p.Addr().IsPrivate() {
		return fmt.Errorf("pod CIDR %q must be a private range (10/8, 172.16/12, 192.168/16)", cfg.PodCIDR)
	}
	if cfg.ServiceCIDR != "" {
		sp, err := netip.ParsePrefix(cfg.ServiceCIDR)
		if err != nil {
			return fmt.Errorf("service CIDR %q: %w", cfg.ServiceCIDR, err)
		}
		if !sp.Addr().Is4() || sp.Masked() != sp || !sp.Addr().IsPrivate() || sp.Overlaps(p) {
			return fmt.Errorf("service CIDR %q must be a private IPv4 network apart from the pod CIDR %s", cfg.ServiceCIDR, cfg.PodCIDR)
		}
	}
	if len(cfg.Nodes) == 0 {
		return errors.New("no nodes: give at least one node name")
	}
	if len(cfg.Nodes) > 250 {
		return fmt.Errorf("%d nodes: at most 250 fit in the pod CIDR", len(cfg.Nodes))
	}
	seen := map[string]bool{}
	for _, n := range cfg.Nodes {
		if n == "" || seen[n] {
			return fmt.Errorf("node names must be unique and non-empty, got %q", cfg.Nodes)
		}
		seen[n] = true
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return fmt.Errorf("state dir %q must be an absolute path", cfg.StateDir)
	}
	return nil
}

// validate checks everything Run needs.
func (cfg Config) validate() error {
	if err := cfg.validateNetwork(); err != nil {
		return err
	}
	if cfg.Client == nil {
		return errors.New("no API client")
	}
	if cfg.BinDir == "" {
		return errors.New("no bin dir: containers' commands are looked up there")
	}
	if cfg.KubeletPort < 0 || cfg.KubeletPort > 65535 {
		return fmt.Errorf("kubelet port %d out of range", cfg.KubeletPort)
	}
	if os.Geteuid() != 0 {
		return errors.New("the node agent must run as root (network namespaces, mounts, setuid)")
	}
	return nil
}

// nodeSubnet is node i's /24 inside the pod CIDR.
func nodeSubnet(podCIDR string, i int) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return netip.Prefix{}, err
	}
	b := p.Addr().As4()
	b[2] = byte(i)
	b[3] = 0
	return netip.PrefixFrom(netip.AddrFrom4(b), 24), nil
}

// gateway is the bridge's address inside a node subnet (.1).
func gateway(subnet netip.Prefix) netip.Addr {
	b := subnet.Addr().As4()
	b[3] = 1
	return netip.AddrFrom4(b)
}

// bridgeName is the one bridge all pods attach to.
func (cfg Config) bridgeName() string { return cfg.Prefix + "-br" }

// netnsName is the pod's network namespace, under /run/netns.
func (cfg Config) netnsName(uid string) string { return cfg.Prefix + "-" + uid }

// HostAddr is the root namespace's address on the bridge as node 0's pods
// see it (their gateway, 10.244.0.1): where the machine's own services are
// reachable from every pod once ServiceCIDR routes the pod CIDR.
func (cfg Config) HostAddr() (netip.Addr, error) {
	sub, err := nodeSubnet(cfg.withDefaults().PodCIDR, 0)
	if err != nil {
		return netip.Addr{}, err
	}
	return gateway(sub), nil
}
