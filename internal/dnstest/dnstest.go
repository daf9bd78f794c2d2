// Package dnstest is a real DNS server (github.com/miekg/dns) on loopback
// for tests: one name, the addresses it answers, the TTL and the rcode,
// changed while it serves.
package dnstest

import (
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Zone is what the server answers for one name: its addresses (A or AAAA
// by family) with TTL, or an rcode other than success; NXDOMAIN for any
// other name. Set its fields before Serve, or through its methods after.
type Zone struct {
	// Name is fully qualified, with the trailing dot.
	Name  string
	Addrs []netip.Addr
	TTL   uint32
	Rcode int
	// TruncateUDP sets TC on every UDP answer with more than this many
	// records (0: never), as a server does past 512 bytes.
	TruncateUDP int

	mu      sync.Mutex
	queries int
}

// Set replaces the addresses.
func (z *Zone) Set(addrs ...netip.Addr) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.Addrs = addrs
}

// SetTTL replaces the TTL.
func (z *Zone) SetTTL(ttl uint32) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.TTL = ttl
}

// SetRcode makes every answer carry rcode (dns.RcodeSuccess: the
// addresses again).
func (z *Zone) SetRcode(rcode int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.Rcode = rcode
}

// Queries counts the questions asked so far.
func (z *Zone) Queries() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.queries
}

func (z *Zone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.queries++
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	q := req.Question[0]
	switch {
	case z.Rcode != dns.RcodeSuccess:
		m.Rcode = z.Rcode
	case q.Name != z.Name:
		m.Rcode = dns.RcodeNameError
	default:
		for _, a := range z.Addrs {
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: z.TTL}
			switch {
			case a.Is4() && q.Qtype == dns.TypeA:
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case a.Is6() && q.Qtype == dns.TypeAAAA:
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp && z.TruncateUDP > 0 && len(m.Answer) > z.TruncateUDP {
			m.Answer, m.Truncated = nil, true
		}
	}
	_ = w.WriteMsg(m)
}

// Serve starts a DNS server for z on loopback over UDP and TCP (one port)
// until the test ends, and returns its address.
func Serve(t testing.TB, z *Zone) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: z}, {Listener: l, Handler: z}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return pc.LocalAddr().String()
}
