package upstream

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// BenchmarkUpstreamsFromSkipper parses a route table of 2,000 Ingress routes
// with 10 endpoints each (a large cluster's Skipper) and reports the cost per
// route: a poll must fit well inside the poll interval.
func BenchmarkUpstreamsFromSkipper(b *testing.B) {
	const routes, eps = 2000, 10
	var sb strings.Builder
	sb.WriteString("[")
	for r := range routes {
		if r > 0 {
			sb.WriteString(",")
		}
		svc := fmt.Sprintf("svc-%d", r)
		if r == routes/2 {
			svc = "epwindow-probe"
		}
		fmt.Fprintf(&sb, `{"id":"kube_epwindow__probe__h%d_____%s","backend":{"type":"lb","algorithm":"roundRobin","endpoints":[`, r, strings.ReplaceAll(svc, "-", "_"))
		for e := range eps {
			if e > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `"http://10.%d.%d.%d:8080"`, r/256, r%256, e+1)
		}
		sb.WriteString(`]},"predicates":[{"name":"PathSubtree","args":["/"]}]}`)
	}
	sb.WriteString("]")
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		got, err := upstreamsFromSkipper(body, probeTarget)
		if err != nil || len(got) != eps {
			b.Fatalf("got %d upstreams, %v", len(got), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/routes, "ns/route")
}

// BenchmarkTrackerAdd feeds polls of 3 replicas listing a 500-endpoint
// Service into a Tracker and reports the cost per listed address.
func BenchmarkTrackerAdd(b *testing.B) {
	const replicas, eps = 3, 500
	var list []netip.AddrPort
	for e := range eps {
		list = append(list, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(e / 256), byte(e % 256)}), 8080))
	}
	tr := NewTracker(stubObserver{}, nil, 0)
	s := Snapshot{Sent: t0, At: t0}
	for r := range replicas {
		s.Replicas = append(s.Replicas, ReplicaUpstreams{Replica: fmt.Sprintf("r%d", r), Upstreams: list, Sent: t0, At: t0})
	}
	for b.Loop() {
		tr.Add(s, nil)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(replicas*eps), "ns/address")
}
