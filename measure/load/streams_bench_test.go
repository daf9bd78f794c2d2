package load

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/probe"
)

// benchProbeEnv makes the test binary a probe (see init): the benchmark
// runs the probe in a process of its own, so that the RSS it reads is the
// client's alone.
const benchProbeEnv = "EPWINDOW_BENCH_PROBE_LISTEN"

func init() {
	addr := os.Getenv(benchProbeEnv)
	if addr == "" {
		return
	}
	raiseNoFile()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	cfg := probe.Config{Listen: "unused", PodName: "bench-probe", Hold: time.Hour, ShutdownTimeout: time.Second,
		StreamInterval: 10 * time.Second, MaxStreamRecords: 16}
	err = probe.Serve(context.Background(), ln, cfg, make(chan struct{}), slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// raiseNoFile lifts RLIMIT_NOFILE's soft limit to the hard one (Go's
// runtime does it at start too, os/rlimit.go; this makes it explicit).
func raiseNoFile() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	l.Cur = l.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	return l.Cur
}

// rssBytes is this process's resident set (VmRSS of /proc/self/status), or
// with field "VmHWM:" its peak.
func rssBytes(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// BenchmarkStreamHerd opens 10,000 WebSocket streams at once (the herd of a
// pod whose every client reconnects immediately) against a probe in its own
// process on loopback, and reports: the open stamp delay (the client's
// stamp at the door minus the probe's clock as it wrote the 101: handshake
// plus the queueing of a 10,000-open herd on this machine; same clock, no
// skew) at p50/p99/max, how long the herd took to open, and the client
// process's RSS with every stream open (after returning the herd's
// garbage to the OS) and its peak. make bench runs it once
// (hack/bench-streams.sh); goals: p99 < 1 ms, RSS ≤ 300 MB.
func BenchmarkStreamHerd(b *testing.B) {
	n := 10000
	if s := os.Getenv("EPWINDOW_BENCH_STREAMS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	if lim := raiseNoFile(); lim < uint64(n)+256 {
		b.Skipf("RLIMIT_NOFILE hard limit %d is below %d streams + 256", lim, n)
	}
	for range b.N {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), benchProbeEnv+"=127.0.0.1:0")
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		addr, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		h, err := NewStreamHolder(StreamConfig{URL: "http://" + strings.TrimSpace(addr) + "/", Protocol: ProtocolWebSocket,
			Streams: n, Reconnect: Reconnect{Policy: ReconnectImmediate}, DialTimeout: time.Minute}, clock.RealClock{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		start := time.Now()
		go func() { h.Run(ctx); close(done) }()
		for h.Open() < int64(n) {
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("%d of %d streams open after 5 minutes", h.Open(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		took := time.Since(start)
		// Steady state: the herd's garbage (handshake requests and
		// responses) returned to the OS, what holding the streams costs.
		debug.FreeOSMemory()
		rss, peak := rssBytes("VmRSS:"), rssBytes("VmHWM:")
		ev, _ := h.Events()
		var delays []float64
		fails := 0
		for _, e := range ev {
			switch {
			case e.Kind == EventOpen && !e.ServerTime.IsZero():
				delays = append(delays, float64(e.At.Sub(e.ServerTime)))
			case e.Kind == EventFail:
				fails++
			}
		}
		cancel()
		<-done
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if len(delays) == 0 {
			b.Fatal("no open carried the probe's time")
		}
		slices.Sort(delays)
		at := func(p float64) float64 { return delays[min(len(delays)-1, int(p*float64(len(delays))))] }
		b.ReportMetric(float64(n), "streams")
		b.ReportMetric(float64(fails), "failed-opens")
		b.ReportMetric(at(0.5), "stamp-p50-ns")
		b.ReportMetric(at(0.99), "stamp-p99-ns")
		b.ReportMetric(delays[len(delays)-1], "stamp-max-ns")
		b.ReportMetric(took.Seconds(), "herd-open-s")
		b.ReportMetric(float64(rss)/(1<<20), "client-rss-MiB")
		b.ReportMetric(float64(peak)/(1<<20), "client-peak-rss-MiB")
	}
}
