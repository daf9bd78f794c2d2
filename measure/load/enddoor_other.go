//go:build !linux

package load

import (
	"errors"
	"syscall"

	"k8s.io/utils/clock"
)

// endDoor needs epoll (Linux): elsewhere an end without data is stamped by
// the read that saw it.
type endDoor struct{}

func newEndDoor(clock.PassiveClock) (*endDoor, error) {
	return nil, errors.New("the end door needs Linux (epoll)")
}

func (d *endDoor) watch(*stampConn, syscall.RawConn) bool { return false }
func (d *endDoor) forget(uint64)                          {}
func (d *endDoor) Close() error                           { return nil }
