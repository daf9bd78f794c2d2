//go:build linux

package load

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// segCapture is the benchmarks' independent clock for the stream stamps:
// a packet socket on the loopback interface (root only) that takes the
// kernel's timestamp of every TCP segment a server port sends, as it is
// transmitted (net/core/dev.c dev_queue_xmit_nit stamps the copy it hands
// to packet sockets; the receiving socket's own stamp is taken after, on
// the receive path). Per client port it keeps the first segment that
// starts a 101 response, the first that starts a WebSocket close frame
// (0x88: FIN and opcode 8, unmasked from a server), and the first FIN or
// RST.
type segCapture struct {
	fd     int
	server uint16
	stop   atomic.Bool
	done   chan struct{}

	mu    sync.Mutex
	first [segKinds]map[uint16]time.Time
}

// Segment kinds segCapture tells apart.
const (
	segUpgrade = iota
	segClose
	segEnd
	segKinds
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// newSegCapture starts capturing the segments sent from server (a port on
// 127.0.0.1).
func newSegCapture(server int) (*segCapture, error) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("packet socket (needs root): %w", err)
	}
	setup := func() error {
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
			return err
		}
		// A 10,000-stream herd sends about 100,000 segments in a second
		// or two, faster than one goroutine drains them on 2 cores.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 1<<30); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			return err
		}
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	}
	if err := setup(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	c := &segCapture{fd: fd, server: uint16(server), done: make(chan struct{})}
	for k := range c.first {
		c.first[k] = map[uint16]time.Time{}
	}
	go c.run()
	return c, nil
}

func (c *segCapture) run() {
	defer close(c.done)
	buf := make([]byte, 1<<16)
	oob := make([]byte, 128)
	for {
		n, oobn, _, from, err := unix.Recvmsg(c.fd, buf, oob, 0)
		if errors.Is(err, unix.EAGAIN) && c.stop.Load() {
			return // stopped, and the queue is drained
		}
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		// On lo every segment is seen twice: as sent and as received.
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype != unix.PACKET_OUTGOING {
			continue
		}
		client, kinds := c.parse(buf[:n])
		if len(kinds) == 0 {
			continue
		}
		at := time.Unix(0, rxStamp(oob[:oobn]))
		c.mu.Lock()
		for _, k := range kinds {
			if _, seen := c.first[k][client]; !seen {
				c.first[k][client] = at
			}
		}
		c.mu.Unlock()
	}
}

// parse reads an IPv4 packet: a TCP segment from the server port, and
// the kinds it carries (a 101 or close frame starting its data, a FIN or
// RST), if any.
func (c *segCapture) parse(p []byte) (client uint16, kinds []int) {
	if len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_TCP {
		return 0, nil
	}
	ihl := int(p[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(p[2:4]))
	if total > len(p) || ihl+20 > total {
		return 0, nil
	}
	tcp := p[ihl:total]
	if binary.BigEndian.Uint16(tcp[0:2]) != c.server {
		return 0, nil
	}
	client = binary.BigEndian.Uint16(tcp[2:4])
	off := int(tcp[12]>>4) * 4
	if off < 20 || off > len(tcp) {
		return 0, nil
	}
	payload := tcp[off:]
	switch {
	case bytes.HasPrefix(payload, []byte("HTTP/1.1 101")):
		kinds = append(kinds, segUpgrade)
	case len(payload) > 0 && payload[0] == 0x88:
		kinds = append(kinds, segClose)
	}
	if tcp[13]&(0x01|0x04) != 0 { // FIN or RST
		kinds = append(kinds, segEnd)
	}
	return client, kinds
}

// Stop ends the capture once it has read every segment queued, and reports the segments the kernel dropped for a
// full socket buffer (PACKET_STATISTICS).
func (c *segCapture) Stop() uint32 {
	c.stop.Store(true)
	<-c.done
	st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	unix.Close(c.fd)
	if err != nil {
		return 0
	}
	return st.Drops
}

// at is the capture's time of the first segment of kind to client.
func (c *segCapture) at(kind int, client uint16) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.first[kind][client]
	return t, ok
}
