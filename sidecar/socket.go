package sidecar

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// TCP states as inet_diag reports them (idiag_state): include/net/tcp_states.h.
// A TIME_WAIT entry reports its substate (TIME_WAIT or FIN_WAIT2), a request
// socket SYN_RECV (net/ipv4/inet_diag.c: inet_twsk_diag_fill, inet_req_diag_fill).
const (
	StateEstablished = 1
	StateSynSent     = 2
	StateSynRecv     = 3
	StateTimeWait    = 6
	StateListen      = 10
	StateNewSynRecv  = 12
)

// Socket is one TCP socket of the namespace, as one inet_diag dump reported it.
type Socket struct {
	// Local and Remote are the socket's addresses, IPv4-mapped IPv6
	// addresses unmapped (a dual-stack listener's IPv4 peers are AF_INET6
	// sockets).
	Local, Remote netip.AddrPort
	// Cookie is the kernel's socket cookie (idiag_cookie): unique per socket
	// in the namespace, and carried over to the socket's TIME_WAIT entry
	// (net/ipv4/inet_timewait_sock.c: inet_twsk_alloc copies sk_cookie to
	// tw_cookie), so one connection keeps its cookie from ESTABLISHED to the
	// end of TIME_WAIT, and a 4-tuple reused for a new connection gets a new one.
	Cookie uint64
	State  uint8
	// Info says tcp_info came with the socket (INET_DIAG_INFO): only full
	// sockets have it, not TIME_WAIT or SYN_RECV entries.
	Info bool
	// BytesReceived is tcpi_bytes_received: payload bytes received.
	BytesReceived uint64
	// LastDataRecv is tcpi_last_data_recv, how long before the dump data was
	// last received (include/uapi/linux/tcp.h, in ms). net/ipv4/tcp.c
	// tcp_get_info computes it as jiffies_to_msecs(tcp_jiffies32 -
	// icsk_ack.lrcvtime), so it is counted in jiffies (1 to 10 ms, by the
	// kernel's HZ); lrcvtime is set when the connection is created
	// (net/ipv4/tcp_minisocks.c tcp_create_openreq_child) and on each data
	// segment, so it means "data" only once BytesReceived > 0.
	LastDataRecv time.Duration
}

// Dumper appends the namespace's TCP sockets (IPv4 and IPv6) to dst and
// returns it. interrupted says the kernel flagged the dump as possibly
// inconsistent (NLM_F_DUMP_INTR): sockets may be missing from it.
type Dumper func(dst []Socket) (socks []Socket, interrupted bool, err error)

// ErrUnsupported is what the kernel reader returns off Linux.
var ErrUnsupported = errors.New("reading sockets needs Linux (NETLINK_SOCK_DIAG)")

// DefaultSNMPPath is the namespace's SNMP counters file.
const DefaultSNMPPath = "/proc/net/snmp"

// ReadPassiveOpens reads Tcp: PassiveOpens from an SNMP counters file such as
// /proc/net/snmp: the connections the namespace's TCP has accepted, every
// port and peer (the kubelet's probes included), counted when the handshake
// completes and the child socket is created (net/ipv4/tcp_minisocks.c:
// tcp_create_openreq_child increments TCP_MIB_PASSIVEOPENS; net/ipv4/proc.c
// prints it as "PassiveOpens" in snmp_seq_show_tcp_udp).
func ReadPassiveOpens(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parsePassiveOpens(f)
}

// parsePassiveOpens finds PassiveOpens in /proc/net/snmp's layout: a "Tcp:"
// line of names followed by a "Tcp:" line of values.
func parsePassiveOpens(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	var names []string
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("Tcp:")) {
			continue
		}
		fields := strings.Fields(string(line[len("Tcp:"):]))
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n != "PassiveOpens" {
				continue
			}
			if i >= len(fields) {
				return 0, errors.New("snmp: Tcp values line shorter than its names")
			}
			v, err := strconv.ParseUint(fields[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("snmp: PassiveOpens %q: %w", fields[i], err)
			}
			return v, nil
		}
		return 0, errors.New("snmp: no PassiveOpens among the Tcp counters")
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("snmp: no Tcp counters")
}
