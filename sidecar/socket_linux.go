package sidecar

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// KernelDumper returns a Dumper that reads the namespace's TCP sockets with
// netlink's SocketDiagTCPInfo (github.com/vishvananda/netlink v1.3.1,
// socket_linux.go): one SOCK_DIAG_BY_FAMILY dump of every state with
// INET_DIAG_INFO, per address family, over one NETLINK_INET_DIAG socket kept
// open between reads. No capability is needed: inet_diag answers any process
// in the namespace, and asks CAP_NET_ADMIN only to add socket marks and
// class ids to the answer (net/ipv4/inet_diag.c, net_admin in
// inet_diag_dump_icsk), which the sidecar does not read. The returned close
// releases the socket.
func KernelDumper() (Dumper, func(), error) {
	h, err := netlink.NewHandle(unix.NETLINK_INET_DIAG)
	if err != nil {
		return nil, nil, fmt.Errorf("open NETLINK_INET_DIAG socket: %w", err)
	}
	var mu sync.Mutex // a Handle's socket serves one request at a time
	noV6 := false
	dump := func(dst []Socket) ([]Socket, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		interrupted := false
		for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
			if fam == unix.AF_INET6 && noV6 {
				continue
			}
			resps, err := h.SocketDiagTCPInfo(fam)
			if errors.Is(err, netlink.ErrDumpInterrupted) {
				interrupted = true
			} else if err != nil {
				if fam == unix.AF_INET6 && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EAFNOSUPPORT)) {
					noV6 = true // a kernel without IPv6: nothing to read there
					continue
				}
				return dst, false, fmt.Errorf("sock_diag dump (family %d): %w", fam, err)
			}
			for _, r := range resps {
				dst = append(dst, fromDiag(r))
			}
		}
		return dst, interrupted, nil
	}
	return dump, h.Close, nil
}

func fromDiag(r *netlink.InetDiagTCPInfoResp) Socket {
	m := r.InetDiagMsg
	s := Socket{
		Local:  netip.AddrPortFrom(addr(m.ID.Source), m.ID.SourcePort),
		Remote: netip.AddrPortFrom(addr(m.ID.Destination), m.ID.DestinationPort),
		Cookie: uint64(m.ID.Cookie[0]) | uint64(m.ID.Cookie[1])<<32,
		State:  m.State,
	}
	if ti := r.TCPInfo; ti != nil {
		s.Info = true
		s.BytesReceived = ti.Bytes_received
		s.LastDataRecv = time.Duration(ti.Last_data_recv) * time.Millisecond
	}
	return s
}

func addr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}
