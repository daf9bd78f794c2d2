//go:build linux

package load

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

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

// readStamped reads p with recvmsg and returns the kernel's receive time
// of the data (nanoseconds since the epoch, 0 if it gave none).
func (c *stampConn) readStamped(p []byte) (int, int64, error) {
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
		return 0, 0, err
	case n == 0 && len(p) > 0:
		return 0, 0, io.EOF
	}
	return n, rxStamp(c.oob[:oobn]), nil
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

// rxStampsOn keeps the kernel's receive timestamps switched on until the
// returned closer is closed. The kernel stamps arriving segments only while
// some socket asks for stamps, and switches that on a moment after the
// first one asks (net/core/dev.c net_enable_timestamp defers it to a work
// item): a stream opened in that moment would have its 101 stamped at the
// read instead. This holds a loopback TCP connection that asks, and waits
// (at most a second) until a byte sent over it comes back stamped. (A
// datagram would not tell: the kernel stamps one at the read if it arrived
// unstamped, net/socket.c __sock_recv_timestamp; TCP hands over only the
// stack's stamp.)
func rxStampsOn() (io.Closer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	srv, err := ln.Accept()
	if err != nil {
		c.Close()
		return nil, err
	}
	defer srv.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil || !enableRxStamps(rc) {
		c.Close()
		return nil, errors.New("SO_TIMESTAMPNS refused on a loopback TCP socket")
	}
	buf, oob := make([]byte, 1), make([]byte, 64)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := srv.Write(buf); err != nil {
			break
		}
		var oobn int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			_, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil || rerr != nil {
			break
		}
		if rxStamp(oob[:oobn]) > 0 {
			return c, nil
		}
	}
	c.Close()
	return nil, errors.New("the kernel did not timestamp loopback TCP data within a second")
}
