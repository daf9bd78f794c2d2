package flock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestAcquireWaitsForTheHolder: flock locks belong to the open file, so a
// second Acquire in the same process waits like another process would.
func TestAcquireWaitsForTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	held, err := Acquire(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	waited := 0
	ctx, cancel := context.WithTimeout(context.Background(), 3*retry)
	defer cancel()
	if f, err := Acquire(ctx, path, func() { waited++ }); !errors.Is(err, context.DeadlineExceeded) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("Acquire while held = %v, want %v", err, context.DeadlineExceeded)
	}
	if waited != 1 {
		t.Errorf("waiting called %d times, want once", waited)
	}
	got := make(chan error, 1)
	go func() {
		f, err := Acquire(context.Background(), path, nil)
		if err == nil {
			f.Close()
		}
		got <- err
	}()
	held.Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire after release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waiting 10s after the holder released the lock")
	}
}
