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
// process on loopback, then kills the probe (every stream ends at once), and
// reports:
//   - the door delay of the stamps (door-open-*, door-close-*): from the
//     return of the socket read that brought the event into the process
//     (the 101, the EOF of the killed probe) to the holder's stamp of it
//     (doorLog), p50/p99/max over the 10,000 opens and 10,000 closes; goal
//     p99 < 1 ms (issue 21: the herd's shape must not be the tool's);
//   - the handshake delay (handshake-*: the stamp minus the probe's clock as
//     it wrote the 101, same clock): what a 10,000-open herd costs this
//     machine end to end (the probe's accept and upgrade, the scheduler),
//     for scale: it is not the stamping;
//   - how long the herd took to open, and the client process's RSS with
//     every stream open (after returning the herd's garbage to the OS;
//     the door's read timing adds 40 bytes a connection) and its peak;
//     goal RSS ≤ 300 MB.
//
// make bench runs it once (hack/bench-streams.sh).
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
		// The first open of every slot is immediate (the herd); the
		// re-opens after the probe is killed wait a minute, past the
		// measurement, so that 10,000 refused dials do not load the
		// machine while the closes are stamped.
		h, err := NewStreamHolder(StreamConfig{URL: "http://" + strings.TrimSpace(addr) + "/", Protocol: ProtocolWebSocket,
			Streams: n, Reconnect: Reconnect{Policy: "fixed", Delay: time.Minute}, DialTimeout: time.Minute}, clock.RealClock{})
		if err != nil {
			b.Fatal(err)
		}
		h.door = newDoorLog()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		start := time.Now()
		go func() { h.Run(ctx); close(done) }()
		waitFor := func(what string, cond func() bool) {
			for !cond() {
				if time.Since(start) > 5*time.Minute {
					b.Fatalf("%s: not after 5 minutes", what)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		waitFor(fmt.Sprintf("%d streams open", n), func() bool { return h.Open() >= int64(n) })
		took := time.Since(start)
		// Steady state: the herd's garbage (handshake requests and
		// responses) returned to the OS, what holding the streams costs.
		debug.FreeOSMemory()
		rss, peak := rssBytes("VmRSS:"), rssBytes("VmHWM:")
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		waitFor("every stream closed", func() bool { return h.Open() == 0 })
		ev, _ := h.Events()
		cancel()
		<-done
		var handshake []time.Duration
		fails := 0
		for _, e := range ev {
			switch {
			case e.Kind == EventOpen && !e.ServerTime.IsZero():
				handshake = append(handshake, e.At.Sub(e.ServerTime))
			case e.Kind == EventFail:
				fails++
			}
		}
		opens, closes := h.door.delays()
		if len(handshake) == 0 || len(opens) < n || len(closes) < n {
			b.Fatalf("%d opens with the probe's time, %d and %d door delays of opens and closes, want %d", len(handshake), len(opens), len(closes), n)
		}
		b.ReportMetric(float64(n), "streams")
		b.ReportMetric(float64(fails), "failed-opens")
		report := func(name string, d []time.Duration) {
			slices.Sort(d)
			at := func(p float64) float64 { return float64(d[min(len(d)-1, int(p*float64(len(d))))]) }
			b.ReportMetric(at(0.5), name+"-p50-ns")
			b.ReportMetric(at(0.99), name+"-p99-ns")
			b.ReportMetric(float64(d[len(d)-1]), name+"-max-ns")
		}
		report("door-open", opens)
		report("door-close", closes)
		report("handshake", handshake)
		b.ReportMetric(took.Seconds(), "herd-open-s")
		b.ReportMetric(float64(rss)/(1<<20), "client-rss-MiB")
		b.ReportMetric(float64(peak)/(1<<20), "client-peak-rss-MiB")
	}
}
