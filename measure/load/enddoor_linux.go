//go:build linux

package load

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
)

// endDoor stamps the ends that carry no data, which the kernel does not
// timestamp for the reader (stampConn): a peer's FIN or reset. It watches
// every connection of a holder in an epoll set of its own, for the peer's
// FIN (EPOLLRDHUP) and a reset or error (EPOLLHUP and EPOLLERR, always
// reported), and one goroutine stamps all the connections one wake-up
// reports at once. In a herd, 10,000 readers woken together are scheduled
// one after another, and the last sees its EOF 100 ms or more after it
// arrived on two cores; the door is one goroutine, woken by the kernel
// (fs/eventpoll.c ep_poll_callback), that waits only for a processor.
// Each registration is one-shot (EPOLLONESHOT): a connection is stamped
// once, and a connection that closes leaves the set with its descriptor
// (the kernel removes it when the file is released).
type endDoor struct {
	clk  clock.PassiveClock
	epfd int
	wake int // an eventfd, registered as id 0: written to stop run
	done chan struct{}

	mu    sync.Mutex
	conns map[uint64]*stampConn
	next  atomic.Uint64
}

// newEndDoor starts a door stamping on clk.
func newEndDoor(clk clock.PassiveClock) (*endDoor, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN}); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	d := &endDoor{clk: clk, epfd: epfd, wake: wake, done: make(chan struct{}), conns: map[uint64]*stampConn{}}
	go d.run()
	return d, nil
}

func (d *endDoor) run() {
	defer close(d.done)
	events := make([]unix.EpollEvent, 512)
	for {
		n, err := unix.EpollWait(d.epfd, events, -1)
		now := d.clk.Now().UnixNano()
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		d.mu.Lock()
		for _, e := range events[:n] {
			id := uint64(uint32(e.Fd)) | uint64(uint32(e.Pad))<<32
			if id == 0 {
				d.mu.Unlock()
				return
			}
			if sc := d.conns[id]; sc != nil {
				delete(d.conns, id)
				sc.end.CompareAndSwap(0, now)
			}
		}
		d.mu.Unlock()
	}
}

// watch adds sc's connection (raw rc) to the set; false if the kernel
// refused it.
func (d *endDoor) watch(sc *stampConn, rc syscall.RawConn) bool {
	id := d.next.Add(1)
	d.mu.Lock()
	d.conns[id] = sc
	d.mu.Unlock()
	var err error
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET | unix.EPOLLONESHOT, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	if cerr := rc.Control(func(fd uintptr) { err = unix.EpollCtl(d.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		d.forget(id)
		return false
	}
	sc.door, sc.doorID = d, id
	return true
}

// forget drops a connection that is closing.
func (d *endDoor) forget(id uint64) {
	d.mu.Lock()
	delete(d.conns, id)
	d.mu.Unlock()
}

// Close stops the door.
func (d *endDoor) Close() error {
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	if _, err := unix.Write(d.wake, one); err != nil {
		return os.NewSyscallError("write", err)
	}
	<-d.done
	unix.Close(d.epfd)
	return unix.Close(d.wake)
}
