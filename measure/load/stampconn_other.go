//go:build !linux

package load

import (
	"errors"
	"io"
	"syscall"
)

// The kernel's receive timestamps (SO_TIMESTAMPNS) are Linux's: elsewhere
// a stream's reads are stamped as they return.

func enableRxStamps(syscall.RawConn) bool { return false }

func (c *stampConn) readStamped(p []byte) (int, int64, error) {
	n, err := c.Conn.Read(p)
	return n, 0, err
}

func rxStampsOn() (io.Closer, error) {
	return nil, errors.New("kernel receive timestamps need Linux")
}
