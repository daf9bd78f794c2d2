// Package flock is the machine-wide lock that local clusters take turns
// on: they share the pod network (one bridge, 10.244.0.0/16).
package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// retry is how often a held lock is tried again.
const retry = 200 * time.Millisecond

// Acquire blocks until this process holds an exclusive flock on path
// (created if missing) or ctx ends, and returns the open file: closing it,
// or exiting, releases the lock. waiting, when set, is called once if the
// lock is held elsewhere. A ctx that ends returns ctx.Err() unwrapped.
func Acquire(ctx context.Context, path string, waiting func()) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s (the local cluster needs root): %w", path, err)
	}
	t := time.NewTicker(retry)
	defer t.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if waiting != nil {
			waiting()
			waiting = nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
