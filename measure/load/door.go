package load

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// doorLog measures how late a StreamHolder's WebSocket stamps are: for each
// open and close, from the moment the event entered the process (the
// return of the socket read that brought the 101's last bytes, the close
// frame, or the EOF or reset) to the holder's stamp of it. What lies
// between is the library's work on those bytes (coder/websocket parses the
// frame; on a close frame it writes its own, read.go handleControl) and the
// scheduler, and nothing of the holder's own: that is the "stamp at the
// door" claim, which BenchmarkStreamHerd checks under a 10,000-stream herd.
// Benchmarks only: every connection is wrapped to time its reads.
type doorLog struct {
	client *http.Client
	base   time.Time // the monotonic origin of doorConn.last

	mu          sync.Mutex
	open, close []time.Duration
}

// doorKey carries an attempt's *atomic.Pointer[doorConn] in its dial
// context: http.Transport hands the request's context (values kept) to
// DialContext (net/http transport.go, dialConnFor).
type doorKey struct{}

func newDoorLog() *doorLog {
	d := &doorLog{base: time.Now()}
	var dialer net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			dc := &doorConn{Conn: c, base: d.base}
			if p, ok := ctx.Value(doorKey{}).(*atomic.Pointer[doorConn]); ok {
				p.Store(dc)
			}
			return dc, nil
		},
		// Each attempt's connection is its own, as with the default
		// client (an upgraded connection is never pooled anyway).
		DisableKeepAlives: true,
	}
	d.client = &http.Client{Transport: tr}
	return d
}

// add records the delay of an open (or close) stamped at at on dc.
func (d *doorLog) add(open bool, at time.Time, dc *doorConn) {
	delay := at.Sub(d.base) - time.Duration(dc.last.Load())
	d.mu.Lock()
	defer d.mu.Unlock()
	if open {
		d.open = append(d.open, delay)
	} else {
		d.close = append(d.close, delay)
	}
}

// delays returns copies of the open and close delays.
func (d *doorLog) delays() (open, close []time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.open...), append([]time.Duration(nil), d.close...)
}

// doorConn is a connection that remembers when its last Read returned, as
// nanoseconds since base (monotonic).
type doorConn struct {
	net.Conn
	base time.Time
	last atomic.Int64
}

func (c *doorConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.last.Store(int64(time.Since(c.base)))
	return n, err
}
