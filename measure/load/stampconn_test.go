//go:build linux

package load

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// stampPair dials a loopback listener with stampDialer and returns the
// stampConn and the server's end of it; on the real clock with the
// kernel's stamps on (rxStampsOn).
func stampPair(t *testing.T, clk clock.PassiveClock) (*stampConn, net.Conn) {
	t.Helper()
	if _, real := clk.(clock.RealClock); real {
		on, err := rxStampsOn()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { on.Close() })
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var p atomic.Pointer[stampConn]
	c, err := stampDialer(clk, nil)(context.WithValue(context.Background(), stampKey{}, &p), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	sc := p.Load()
	if sc == nil || sc != c {
		t.Fatal("the dial context was not told the connection")
	}
	return sc, srv
}

// The stamp of data is when it reached the client's kernel, not when the
// client got round to reading it. On loopback the receive stamp is taken
// inside the sender's write (net/core/dev.c: the loopback device hands
// the segment to the receive path in the sending call), so it lies between
// the server's clock before and after its write; the client reads 50 ms
// later, which a stamp taken at the read would show.
func TestStampConnKernelStampsData(t *testing.T) {
	sc, srv := stampPair(t, clock.RealClock{})
	if sc.rc == nil {
		t.Fatal("the kernel refused SO_TIMESTAMPNS")
	}
	before := time.Now()
	if _, err := srv.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	time.Sleep(50 * time.Millisecond)
	buf := make([]byte, 16)
	n, err := sc.Read(buf)
	read := time.Now()
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	at := sc.dataAt(time.Time{})
	if at.Before(before) || at.After(after) {
		t.Errorf("data stamped %s after the write began, want within the write (%s); read %s after", at.Sub(before), after.Sub(before), read.Sub(before))
	}

	// An end carries no data and no kernel stamp: it is stamped as the
	// read that saw it returns, after the close.
	closed := time.Now()
	srv.Close()
	if _, err := sc.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the server's close: %v, want EOF", err)
	}
	end := sc.endAt(time.Time{})
	if end.Before(closed) || end.After(time.Now()) {
		t.Errorf("end stamped %s after the close, want between the close and now", end.Sub(closed))
	}
	if sc.dataAt(time.Time{}) != at {
		t.Error("the end moved the data stamp")
	}
}

// What the kernel reports for a read that takes several segments is the
// last one's arrival, and TCP merges a segment that arrives behind unread
// data into it (net/ipv4/tcp_input.c tcp_try_coalesce copies the newer
// stamp): data read late can carry the stamp of what came after it. The
// stamp is then late, never early; BenchmarkStreamHerd shows how often a
// herd hits it.
func TestStampConnLastSegmentWins(t *testing.T) {
	sc, srv := stampPair(t, clock.RealClock{})
	if sc.rc == nil {
		t.Fatal("the kernel refused SO_TIMESTAMPNS")
	}
	if _, err := srv.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	second := time.Now()
	if _, err := srv.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := io.ReadAtLeast(sc, buf, 2)
	if err != nil || string(buf[:n]) != "ab" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if at := sc.dataAt(time.Time{}); at.Before(second) {
		t.Errorf("two segments read at once stamped %s before the second was written, want the second's arrival", second.Sub(at))
	}
}

// On a fake clock the stamps are the clock's (kernel stamps are wall
// clock), taken as each read returns.
func TestStampConnFakeClock(t *testing.T) {
	fake := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sc, srv := stampPair(t, fake)
	if sc.rc != nil {
		t.Fatal("kernel stamps on a fake clock")
	}
	if _, err := srv.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Read(make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if at := sc.dataAt(time.Time{}); !at.Equal(fake.Now()) {
		t.Errorf("stamped %s, want the fake clock's %s", at, fake.Now())
	}
	if at := sc.endAt(time.Unix(1, 0)); !at.Equal(time.Unix(1, 0)) {
		t.Errorf("no end yet, stamped %s, want the fallback", at)
	}
}

// A peer's FIN or reset carries no data, so the kernel gives the reader no
// stamp for it; the end door stamps it as it arrives, while nobody reads.
// The client reads 50 ms after the end: a stamp in the first half of that
// is the door's (its goroutine waits only for a processor), not the read's.
func TestEndDoorStampsFINAndReset(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := "fin"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			d, ln := doorAndListener(t)
			c, err := stampDialer(clock.RealClock{}, func() *endDoor { return d })(context.Background(), "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sc := c.(*stampConn)
			if sc.door != d {
				t.Fatal("the connection is not in the door")
			}
			srv, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			if reset {
				srv.(*net.TCPConn).SetLinger(0) // close sends RST
			}
			closed := time.Now()
			srv.Close()
			time.Sleep(50 * time.Millisecond)
			_, err = sc.Read(make([]byte, 4))
			if err == nil {
				t.Fatal("read after the peer's end: no error")
			}
			at := sc.endAt(time.Time{})
			if at.Before(closed) || at.Sub(closed) > 25*time.Millisecond {
				t.Errorf("end stamped %s after the peer's close, want by the door within 25 ms (the read came at 50 ms; %v)", at.Sub(closed), err)
			}
		})
	}
}

// A connection closed by its own side leaves the door's map.
func TestEndDoorForgetsClosed(t *testing.T) {
	d, ln := doorAndListener(t)
	for range 3 {
		c, err := stampDialer(clock.RealClock{}, func() *endDoor { return d })(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.conns) != 0 {
		t.Errorf("%d connections left in the door after their close", len(d.conns))
	}
}

// doorAndListener starts an end door and a loopback listener, both closed
// when t ends.
func doorAndListener(t *testing.T) (*endDoor, net.Listener) {
	t.Helper()
	d, err := newEndDoor(clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return d, ln
}
