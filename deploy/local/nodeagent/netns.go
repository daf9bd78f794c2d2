package nodeagent

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on an OS thread that has entered the network namespace at
// nsPath. Sockets fn creates stay in that namespace after it returns. The
// thread goes back to its own namespace afterwards; if it cannot, it is left
// locked so that the Go runtime discards it.
func inNetns(nsPath string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open network namespace %s: %w", nsPath, err)
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", nsPath, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread exits with this goroutine.
			errc <- fmt.Errorf("leave network namespace %s: %w", nsPath, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
