package nodeagent

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podDNS follows the kubelet's GetPodDNS (pkg/kubelet/network/dns/dns.go):
// each policy's nameservers, search path and options, and the pod's
// dnsConfig merged in.
func TestPodDNS(t *testing.T) {
	host := parseResolvConf([]byte("# the machine's\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"))
	dns := []netip.Addr{netip.MustParseAddr("10.96.0.10")}
	two := "2"
	pod := func(policy v1.DNSPolicy, hostNet bool, cfg *v1.PodDNSConfig) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"},
			Spec: v1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: cfg}}
	}
	clusterFirst := "nameserver 10.96.0.10\nsearch team.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:5\n"
	for _, tc := range []struct {
		name    string
		cluster []netip.Addr
		pod     *v1.Pod
		want    string // "" keeps the machine's file
	}{
		{"default policy is ClusterFirst", dns, pod("", false, nil), clusterFirst},
		{"ClusterFirst", dns, pod(v1.DNSClusterFirst, false, nil), clusterFirst},
		{"ClusterFirst without cluster DNS falls back to Default", nil, pod(v1.DNSClusterFirst, false, nil), ""},
		{"Default", dns, pod(v1.DNSDefault, false, nil), ""},
		{"ClusterFirst on the host network is Default", dns, pod(v1.DNSClusterFirst, true, nil), ""},
		{"ClusterFirstWithHostNet", dns, pod(v1.DNSClusterFirstWithHostNet, true, nil), clusterFirst},
		{"None takes dnsConfig alone", dns, pod(v1.DNSNone, false, &v1.PodDNSConfig{
			Nameservers: []string{"10.0.0.1"}, Searches: []string{"a.example"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}}}),
			"nameserver 10.0.0.1\nsearch a.example\noptions ndots:2\n"},
		{"dnsConfig merges: no duplicates, the pod's option wins", dns, pod(v1.DNSClusterFirst, false, &v1.PodDNSConfig{
			Nameservers: []string{"10.96.0.10", "10.0.0.1"}, Searches: []string{"cluster.local", "b.example"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "single-request"}}}),
			"nameserver 10.96.0.10\nnameserver 10.0.0.1\nsearch team.svc.cluster.local svc.cluster.local cluster.local corp.example b.example\noptions ndots:2 single-request\n"},
		{"Default with dnsConfig starts from the machine's", dns, pod(v1.DNSDefault, false, &v1.PodDNSConfig{Searches: []string{"c.example"}}),
			"nameserver 192.0.2.53\nsearch corp.example c.example\noptions edns0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, ok := podDNS(tc.cluster, DefaultClusterDomain, host, tc.pod)
			got := ""
			if ok {
				got = rc.String()
			}
			if got != tc.want {
				t.Errorf("resolv.conf\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// glibc reads the last search (or domain) line and every nameserver.
func TestParseResolvConf(t *testing.T) {
	rc := parseResolvConf([]byte("domain old.example\nnameserver 192.0.2.1\n; comment\nnameserver 192.0.2.2\nsearch a.example b.example\noptions ndots:1 timeout:2\n"))
	if got, want := rc.String(), "nameserver 192.0.2.1\nnameserver 192.0.2.2\nsearch a.example b.example\noptions ndots:1 timeout:2\n"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
