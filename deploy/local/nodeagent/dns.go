package nodeagent

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// DefaultClusterDomain is the cluster's DNS domain when Config leaves it
// empty (the kubelet's --cluster-domain as kubeadm sets it).
const DefaultClusterDomain = "cluster.local"

// hostResolvConf is the machine's resolver configuration: what a pod of
// dnsPolicy Default sees, and what the shim mounts over.
const hostResolvConf = "/etc/resolv.conf"

// resolvConf is one resolv.conf: its nameservers, search domains and
// options, in order.
type resolvConf struct {
	nameservers, searches, options []string
}

// parseResolvConf reads the nameserver, search and options lines of a
// resolv.conf (resolv.conf(5); "domain" counts as a one-entry search, and
// the last search line wins, as glibc reads it).
func parseResolvConf(b []byte) resolvConf {
	var rc resolvConf
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				rc.nameservers = append(rc.nameservers, f[1])
			}
		case "search", "domain":
			rc.searches = slices.Clone(f[1:])
		case "options":
			rc.options = append(rc.options, f[1:]...)
		}
	}
	return rc
}

// String is rc as a resolv.conf file.
func (rc resolvConf) String() string {
	var b strings.Builder
	for _, ns := range rc.nameservers {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	if len(rc.searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(rc.searches, " "))
	}
	if len(rc.options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(rc.options, " "))
	}
	return b.String()
}

// podDNS is the resolv.conf pod's containers see, as the kubelet makes it
// (pkg/kubelet/network/dns/dns.go, GetPodDNS): ClusterFirst (the default)
// gives the cluster's DNS servers, the search path
// <ns>.svc.<domain> svc.<domain> <domain> followed by the machine's, and
// ndots:5; with no cluster DNS configured it falls back to Default, the
// machine's own file; None starts empty; ClusterFirstWithHostNet is
// ClusterFirst, and ClusterFirst on a host-network pod is Default. The
// pod's dnsConfig is then merged in (appendDNSConfig: nameservers and
// searches appended without duplicates, options by name, the pod's value
// winning). ok is false when the pod keeps the machine's file unchanged.
func podDNS(clusterDNS []netip.Addr, domain string, host resolvConf, pod *v1.Pod) (rc resolvConf, ok bool) {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	switch {
	case policy == v1.DNSClusterFirstWithHostNet:
		policy = v1.DNSClusterFirst
	case policy == v1.DNSClusterFirst && pod.Spec.HostNetwork:
		policy = v1.DNSDefault
	}
	if policy == v1.DNSClusterFirst && len(clusterDNS) == 0 {
		policy = v1.DNSDefault
	}
	switch policy {
	case v1.DNSClusterFirst:
		for _, a := range clusterDNS {
			rc.nameservers = append(rc.nameservers, a.String())
		}
		ns := pod.Namespace
		if ns == "" {
			ns = v1.NamespaceDefault
		}
		rc.searches = append([]string{ns + ".svc." + domain, "svc." + domain, domain}, host.searches...)
		rc.options = []string{"ndots:5"}
	case v1.DNSDefault:
		if pod.Spec.DNSConfig == nil {
			return resolvConf{}, false
		}
		rc = resolvConf{nameservers: slices.Clone(host.nameservers), searches: slices.Clone(host.searches), options: slices.Clone(host.options)}
	case v1.DNSNone:
	}
	if c := pod.Spec.DNSConfig; c != nil {
		rc.nameservers = appendNew(rc.nameservers, c.Nameservers...)
		rc.searches = appendNew(rc.searches, c.Searches...)
		for _, o := range c.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			rc.options = slices.DeleteFunc(rc.options, func(s string) bool {
				name, _, _ := strings.Cut(s, ":")
				return name == o.Name
			})
			rc.options = append(rc.options, opt)
		}
	}
	return rc, true
}

func appendNew(to []string, add ...string) []string {
	for _, s := range add {
		if !slices.Contains(to, s) {
			to = append(to, s)
		}
	}
	return to
}

// writePodDNS writes the pod's resolv.conf into its directory and returns
// its path, "" when the pod keeps the machine's file.
func (w *podWorker) writePodDNS() (string, error) {
	host, err := os.ReadFile(hostResolvConf)
	missing := os.IsNotExist(err)
	if err != nil && !missing {
		return "", fmt.Errorf("pod DNS: %w", err)
	}
	cfg := w.a.cfg
	rc, ok := podDNS(cfg.ClusterDNS, cfg.clusterDomain(), parseResolvConf(host), w.pod)
	if !ok {
		return "", nil
	}
	if missing {
		return "", fmt.Errorf("pod DNS: the machine has no %s to mount the pod's over", hostResolvConf)
	}
	path := w.dir + "/resolv.conf"
	if err := os.WriteFile(path, []byte(rc.String()), 0o644); err != nil {
		return "", fmt.Errorf("pod DNS: %w", err)
	}
	return path, nil
}
