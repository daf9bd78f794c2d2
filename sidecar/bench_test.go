package sidecar

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkKernelDump times one dump of this namespace's TCP sockets. Its
// cost is mostly the kernel's walk of the TCP established hash table
// (net/ipv4/inet_diag.c inet_diag_dump_icsk visits every bucket), which a
// namespace shares with the host unless it was created with
// net.ipv4.tcp_child_ehash_entries set: the buckets metric is
// net.ipv4.tcp_ehash_entries (negative: the shared table).
func BenchmarkKernelDump(b *testing.B) {
	dump, closeDump, err := KernelDumper()
	if err != nil {
		b.Skip(err)
	}
	defer closeDump()
	var socks []Socket
	for b.Loop() {
		if socks, _, err = dump(socks[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(socks)), "sockets")
	if v, err := os.ReadFile("/proc/sys/net/ipv4/tcp_ehash_entries"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(v))); err == nil {
			b.ReportMetric(float64(n), "ehash_buckets")
		}
	}
}
