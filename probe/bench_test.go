package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The benchmarks drive the probe and a bare net/http hello handler with the
// same load generator, in this process, on loopback. hack/bench-probe.sh
// runs them and prints the ratio and the heap figures.

// loadConn is a minimal HTTP/1.1 client connection: the load generator must
// cost as little as possible, or it hides the server's cost in the ratio.
type loadConn struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

var benchRequest = []byte("GET /bench HTTP/1.1\r\nHost: probe\r\n\r\n")

func dialLoad(addr string, local net.IP) (*loadConn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if local != nil {
		d.LocalAddr = &net.TCPAddr{IP: local}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &loadConn{c: c, br: bufio.NewReaderSize(c, 4096), req: benchRequest}, nil
}

var contentLength = []byte("Content-Length: ")

// get sends one request and reads its response (status 200 required).
func (lc *loadConn) get() error {
	if _, err := lc.c.Write(lc.req); err != nil {
		return err
	}
	line, err := lc.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("response %q", line)
	}
	n := -1
	for {
		line, err = lc.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, contentLength); ok {
			n, err = strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil {
				return err
			}
		}
	}
	if n < 0 {
		return errors.New("response without Content-Length")
	}
	_, err = lc.br.Discard(n)
	return err
}

func (lc *loadConn) close() { lc.c.Close() }

// peerIP is the i-th of the distinct loopback source addresses 127.1.0.0 and
// up (Linux routes all of 127.0.0.0/8 to lo).
func peerIP(i int) net.IP { return net.IPv4(127, 1+byte(i>>16), byte(i>>8), byte(i)) }

// benchServer is a server under load and how to stop it.
type benchServer struct {
	addr string
	stop func()
	rec  func() Timeline // nil for the bare server
}

func startBare(b *testing.B) benchServer {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hello := []byte("hello\n")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(hello)
	})}
	go srv.Serve(ln)
	return benchServer{addr: ln.Addr().String(), stop: func() { srv.Close() }}
}

func startProbeServer(b *testing.B) benchServer {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := Config{Listen: "unused", PodName: "probe-bench", Hold: time.Minute, MaxPeers: DefaultMaxPeers, ShutdownTimeout: time.Second}
	// Serve's recorder is internal; /timeline reads it like the tool does.
	go func() {
		done <- Serve(ctx, ln, cfg, make(chan struct{}), slog.New(slog.NewJSONHandler(io.Discard, nil)))
	}()
	addr := ln.Addr().String()
	return benchServer{
		addr: addr,
		stop: func() { cancel(); <-done },
		rec: func() Timeline {
			resp, err := http.Get("http://" + addr + PathTimeline)
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			tl, err := ParseTimeline(body)
			if err != nil {
				b.Fatal(err)
			}
			return tl
		},
	}
}

// load runs total requests against addr from workers goroutines. With
// perConn > 0 each connection carries perConn requests and is then closed,
// and connection k comes from source address peerIP(firstConn+k % peers).
// It returns the elapsed time.
func load(addr string, workers, total, perConn, firstConn, peers int) (time.Duration, error) {
	if perConn <= 0 {
		perConn = total
	}
	conns := (total + perConn - 1) / perConn
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= conns {
					return
				}
				var local net.IP
				if peers > 0 {
					local = peerIP((firstConn + k) % peers)
				}
				lc, err := dialLoad(addr, local)
				if err != nil {
					errs <- err
					return
				}
				n := min(perConn, total-k*perConn)
				for i := 0; i < n; i++ {
					if err := lc.get(); err != nil {
						lc.close()
						errs <- err
						return
					}
				}
				lc.close()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	return elapsed, <-errs
}

// BenchmarkProbeVsBare compares the probe's throughput with a bare net/http
// hello handler under the same load, in paired rounds (alternating which
// goes first, so drift on a shared machine hits both alike). One iteration is
// one round of each. Metrics: bare-req/s and probe-req/s over all rounds and
// their ratio (probe/bare; the goal is ≥ 0.9), and the same per CPU-second.
func BenchmarkProbeVsBare(b *testing.B) {
	for _, shape := range []struct {
		name             string
		requests, perReq int
		peers            int
	}{
		// 8 keep-alive connections: the request path.
		{name: "keepalive", requests: 16000, perReq: 2000},
		// One connection per request from 256 source addresses: the accept
		// path, per-peer records included.
		{name: "conn-per-request", requests: 2000, perReq: 1, peers: 256},
	} {
		b.Run(shape.name, func(b *testing.B) {
			bare, probe := startBare(b), startProbeServer(b)
			defer bare.stop()
			defer probe.stop()
			var bareT, probeT, bareCPU, probeCPU time.Duration
			conn := 0
			run := func(s benchServer, wall, cpu *time.Duration) {
				c0 := cpuTime(b)
				d, err := load(s.addr, 8, shape.requests, shape.perReq, conn, shape.peers)
				if err != nil {
					b.Fatal(err)
				}
				*cpu += cpuTime(b) - c0
				*wall += d
				conn += shape.requests / shape.perReq
			}
			// Warm both up (connections, goroutine stacks, peer records).
			var scratch time.Duration
			run(bare, &scratch, &scratch)
			run(probe, &scratch, &scratch)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					run(bare, &bareT, &bareCPU)
					run(probe, &probeT, &probeCPU)
				} else {
					run(probe, &probeT, &probeCPU)
					run(bare, &bareT, &bareCPU)
				}
			}
			b.StopTimer()
			n := float64(b.N * shape.requests)
			b.ReportMetric(n/bareT.Seconds(), "bare-req/s")
			b.ReportMetric(n/probeT.Seconds(), "probe-req/s")
			b.ReportMetric(bareT.Seconds()/probeT.Seconds(), "ratio")
			// The same in requests per CPU-second of this process (server and
			// load generator; the idle server costs nothing): on a machine
			// shared with other work, wall-clock rates follow the CPU share
			// this process gets, CPU cost per request does not.
			b.ReportMetric(n/bareCPU.Seconds(), "bare-req/cpu-s")
			b.ReportMetric(n/probeCPU.Seconds(), "probe-req/cpu-s")
			b.ReportMetric(bareCPU.Seconds()/probeCPU.Seconds(), "cpu-ratio")
			if tl := probe.rec(); tl.TrafficRequests < int64(n) {
				b.Fatalf("probe recorded %d traffic requests, sent at least %.0f", tl.TrafficRequests, n)
			}
		})
	}
}

// cpuTime is the user plus system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapMB is the live heap after a full collection, in MiB.
func heapMB() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// BenchmarkProbeHeapPeers sends 10^6 requests from 10^4 distinct peer
// addresses (25 requests per connection, so 4·10^4 connections, 4 per peer)
// and reports the live heap of this process — probe and load generator —
// before the load and after 10^4 … 10^6 requests. Every peer has been seen
// after 2.5·10^5 requests, so from there on a flat heap means nothing grows
// per request or per connection; the per-peer records are capped
// (--max-peers, 1024) and the rest is counted as overflow.
func BenchmarkProbeHeapPeers(b *testing.B) {
	const (
		peers   = 10_000
		perConn = 25
	)
	checkpoints := []struct {
		requests int
		unit     string
	}{
		{1e4, "heap-MB@1e4"}, {1e5, "heap-MB@1e5"}, {2.5e5, "heap-MB@2.5e5"},
		{5e5, "heap-MB@5e5"}, {1e6, "heap-MB@1e6"},
	}
	for i := 0; i < b.N; i++ {
		before := heapMB()
		probe := startProbeServer(b)
		b.ReportMetric(before, "heap-MB@0")
		sent := 0
		var busy time.Duration
		for _, cp := range checkpoints {
			d, err := load(probe.addr, 8, cp.requests-sent, perConn, sent/perConn, peers)
			if err != nil {
				b.Fatal(err)
			}
			busy += d
			sent = cp.requests
			b.ReportMetric(heapMB(), cp.unit)
		}
		tl := probe.rec()
		probe.stop()
		if tl.TrafficRequests != int64(sent) || tl.TrafficAccepts != int64(sent/perConn) {
			b.Fatalf("probe recorded %d requests / %d accepts, sent %d / %d", tl.TrafficRequests, tl.TrafficAccepts, sent, sent/perConn)
		}
		b.ReportMetric(float64(len(tl.Peers)), "peers-recorded")
		b.ReportMetric(float64(tl.PeersOverflow), "peer-overflow-accepts")
		b.ReportMetric(float64(sent)/busy.Seconds(), "req/s")
	}
}
