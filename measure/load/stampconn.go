package load

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

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
// FIN, a reset) carries no kernel stamp: it is stamped by the holder's end
// door as it arrives (endDoor), or else as the read that saw it returned,
// before the library's own close and write (a close frame in reply, the
// socket's close), which can wait for the scheduler.
//
// One goroutine reads a connection at a time (the dialer up to the 101,
// then the holder's reader), so the buffer for the control message is the
// connection's own.
type stampConn struct {
	net.Conn
	rc  syscall.RawConn // nil: plain reads, stamped as they return
	clk clock.PassiveClock
	oob [64]byte

	// data is the arrival of the last read's data; end the first sign of
	// the stream's end: the end door's wake-up on the peer's FIN or reset,
	// or the return of a read that failed (EOF or error). Nanoseconds
	// since the epoch, zero when not yet.
	data, end atomic.Int64

	door   *endDoor // nil: no door
	doorID uint64
}

// Close takes the connection out of its end door, then closes it.
func (c *stampConn) Close() error {
	if c.door != nil {
		c.door.forget(c.doorID)
	}
	return c.Conn.Close()
}

// stampKey carries an attempt's *atomic.Pointer[stampConn] in its dial
// context: gorilla/websocket's Dialer.DialContext hands its context to
// NetDialContext (client.go).
type stampKey struct{}

// stampDialer dials TCP connections wrapped in a stampConn, adds each to
// the end door door() returns if not nil, and tells the dial context's
// stampKey pointer, if any, which. Kernel timestamps are on the wall
// clock, so they are asked for only when clk is the real clock.
func stampDialer(clk clock.PassiveClock, door func() *endDoor) func(ctx context.Context, network, addr string) (net.Conn, error) {
	_, kernel := clk.(clock.RealClock)
	var dialer net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc := &stampConn{Conn: c, clk: clk}
		if tc, ok := c.(*net.TCPConn); ok {
			if rc, err := tc.SyscallConn(); err == nil {
				if kernel && enableRxStamps(rc) {
					sc.rc = rc
				}
				if door != nil {
					if d := door(); d != nil {
						d.watch(sc, rc)
					}
				}
			}
		}
		if p, ok := ctx.Value(stampKey{}).(*atomic.Pointer[stampConn]); ok {
			p.Store(sc)
		}
		return sc, nil
	}
}

func (c *stampConn) Read(p []byte) (int, error) {
	if c.rc == nil {
		n, err := c.Conn.Read(p)
		c.stamp(n, err, 0)
		return n, err
	}
	n, kernel, err := c.readStamped(p)
	c.stamp(n, err, kernel)
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

// dataAt is the arrival of the last data read, or fallback if none.
func (c *stampConn) dataAt(fallback time.Time) time.Time {
	if c == nil {
		return fallback
	}
	return stampOr(&c.data, fallback)
}

// endAt is the first sign of the stream's end (end), or fallback.
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
