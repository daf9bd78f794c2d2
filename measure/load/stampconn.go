package load

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
)

// stampConn is a stream's TCP connection that stamps its reads at the
// door. A WebSocket's open (the 101), messages and close frame are data:
// each read asks the kernel for the receive time of the data it returns
// (SO_TIMESTAMPNS: the software timestamp the stack takes as the segment
// arrives, net/core/dev.c netif_receive_skb, which tcp_recvmsg hands to the
// last segment a read copies, net/ipv4/tcp.c tcp_recv_timestamp). That
// stamp does not move when the process is slow to read: in a
// 10,000-stream herd on 2 cores the last 101 is read close to a second
// after it arrived (BenchmarkStreamHerd), and a stamp taken after the read
// would spread the herd by that much. An end without data (the EOF of a
// FIN, a reset) carries no kernel stamp: it is stamped as the read that
// saw it returned, before the library's own close and write (a close frame
// in reply, the socket's close), which can wait for the scheduler.
//
// One goroutine reads a connection at a time (the dialer up to the 101,
// then the holder's reader), so the buffer for the control message is the
// connection's own.
type stampConn struct {
	net.Conn
	rc  syscall.RawConn // nil: plain reads, stamped as they return
	clk clock.PassiveClock
	oob [64]byte

	// data is the arrival of the last read's data, end the return of the
	// first read that ended the stream (EOF or error): nanoseconds since
	// the epoch, zero when not yet.
	data, end atomic.Int64
}

// stampKey carries an attempt's *atomic.Pointer[stampConn] in its dial
// context: gorilla/websocket's Dialer.DialContext hands its context to
// NetDialContext (client.go).
type stampKey struct{}

// stampDialer dials TCP connections wrapped in a stampConn and tells the
// dial context's stampKey pointer, if any, which. Kernel timestamps are on
// the wall clock, so they are asked for only when clk is the real clock.
func stampDialer(clk clock.PassiveClock) func(ctx context.Context, network, addr string) (net.Conn, error) {
	_, kernel := clk.(clock.RealClock)
	var dialer net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc := &stampConn{Conn: c, clk: clk}
		if tc, ok := c.(*net.TCPConn); ok && kernel {
			if rc, err := tc.SyscallConn(); err == nil && enableRxStamps(rc) {
				sc.rc = rc
			}
		}
		if p, ok := ctx.Value(stampKey{}).(*atomic.Pointer[stampConn]); ok {
			p.Store(sc)
		}
		return sc, nil
	}
}

// enableRxStamps turns on SO_TIMESTAMPNS; false if the kernel refuses.
func enableRxStamps(rc syscall.RawConn) bool {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return false
	}
	return serr == nil
}

func (c *stampConn) Read(p []byte) (int, error) {
	if c.rc == nil {
		n, err := c.Conn.Read(p)
		c.stamp(n, err, 0)
		return n, err
	}
	var n, oobn int
	var rerr error
	err := c.rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, c.oob[:], 0)
		return rerr != unix.EAGAIN
	})
	if err == nil && rerr != nil {
		err = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("recvmsg", rerr)}
	}
	switch {
	case err != nil:
		n = 0
	case n == 0 && len(p) > 0:
		err = io.EOF
	}
	c.stamp(n, err, rxStamp(c.oob[:oobn]))
	return n, err
}

// stamp records a read of n bytes that returned err; kernel is the data's
// receive time in nanoseconds since the epoch, or 0.
func (c *stampConn) stamp(n int, err error, kernel int64) {
	switch {
	case n > 0 && kernel > 0:
		c.data.Store(kernel)
	case n > 0:
		c.data.Store(c.clk.Now().UnixNano())
	case err != nil && !errors.Is(err, syscall.EAGAIN):
		c.end.CompareAndSwap(0, c.clk.Now().UnixNano())
	}
}

// rxStamp is the SO_TIMESTAMPNS time in a read's control messages, or 0.
func rxStamp(oob []byte) int64 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return ts.Nano()
		}
	}
	return 0
}

// dataAt is the arrival of the last data read, or fallback if none.
func (c *stampConn) dataAt(fallback time.Time) time.Time {
	if c == nil {
		return fallback
	}
	return stampOr(&c.data, fallback)
}

// endAt is the return of the read that ended the stream, or fallback.
func (c *stampConn) endAt(fallback time.Time) time.Time {
	if c == nil {
		return fallback
	}
	return stampOr(&c.end, fallback)
}

func stampOr(ns *atomic.Int64, fallback time.Time) time.Time {
	if v := ns.Load(); v > 0 {
		return time.Unix(0, v)
	}
	return fallback
}

// rxStampsOn keeps the kernel's receive timestamps switched on until the
// returned closer is closed. The kernel stamps arriving segments only while
// some socket asks for stamps, and switches that on a moment after the
// first one asks (net/core/dev.c net_enable_timestamp defers it to a work
// item): a stream opened in that moment would have its 101 stamped at the
// read instead. This holds a UDP socket on 127.0.0.1 that asks, and waits
// (at most a second) until a datagram it sends itself comes back stamped.
func rxStampsOn() (io.Closer, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), "rx-stamps")
	fail := func(call string, err error) (io.Closer, error) {
		f.Close()
		return nil, os.NewSyscallError(call, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("setsockopt SO_TIMESTAMPNS", err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 10000}); err != nil {
		return fail("setsockopt SO_RCVTIMEO", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fail("bind", err)
	}
	self, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	buf, oob := make([]byte, 1), make([]byte, 64)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if err := unix.Sendto(fd, buf, 0, self); err != nil {
			return fail("sendto", err)
		}
		_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err == nil && rxStamp(oob[:oobn]) > 0 {
			return f, nil
		}
	}
	f.Close()
	return nil, errors.New("the kernel did not timestamp a loopback datagram within a second")
}
