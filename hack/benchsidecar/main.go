// Command benchsidecar prints what `epwindow sidecar` costs beside a busy
// app (issue 46 item 1): a plain net/http server on loopback (the app, a
// process of its own) takes -rate requests a second from a paced client in
// this process, first over kept-alive connections, then one new connection
// per request, while bin/epwindow sidecar (another process) dumps the
// namespace's sockets every -interval. For each phase, and for an idle one
// before them, it prints both processes' CPU (utime+stime from
// /proc/PID/stat over the phase, as a share of one core) and their ratio,
// then each process's peak RSS (VmHWM) and the sidecar's own poll figures
// from its termination record.
//
// The sidecar dumps every socket of the namespace, so its cost grows with
// the socket count: with one new connection per request the server closes
// first and keeps each connection 60 s in TIME_WAIT, which the dumps list.
// The client's sockets are in the same namespace here (in a pod they are
// elsewhere); they leave no TIME_WAIT, the server closing first.
// Linux only (inet_diag, /proc). Needs bin/epwindow (make build); make
// bench runs it. About 3 × -phase plus the idle phase.
//
//	go run ./hack/benchsidecar [-epwindow bin/epwindow] [-rate 2000] [-phase 20s] [-interval 10ms] [-max-cpu 0.25]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/epwindow/epwindow/sidecar"
)

// userHZ is the unit of /proc/PID/stat's utime and stime: USER_HZ, 100 on
// every Linux architecture's user ABI (include/asm-generic/param.h).
const userHZ = 100

func main() {
	serve := flag.Bool("serve", false, "internal: run as the app server (prints its address)")
	bin := flag.String("epwindow", "bin/epwindow", "the epwindow binary whose sidecar is measured")
	rate := flag.Int("rate", 2000, "requests a second to the app")
	phase := flag.Duration("phase", 20*time.Second, "length of each loaded phase")
	idle := flag.Duration("idle", 5*time.Second, "length of the idle phase before them")
	interval := flag.Duration("interval", sidecar.DefaultInterval, "the sidecar's --interval")
	maxCPU := flag.Float64("max-cpu", sidecar.DefaultMaxCPU, "the sidecar's --max-cpu")
	flag.Parse()
	if *serve {
		serveApp()
		return
	}
	if err := run(*bin, *rate, *phase, *idle, *interval, *maxCPU); err != nil {
		fmt.Fprintln(os.Stderr, "benchsidecar:", err)
		os.Exit(1)
	}
}

// serveApp is the app: a net/http server on 127.0.0.1, its address on
// stdout, until stdin closes.
func serveApp() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); os.Exit(0) }()
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	}))
}

type proc struct {
	cmd  *exec.Cmd
	name string
}

// cpu is the process's CPU time so far.
func (p proc) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name's closing parenthesis: state is 3,
	// utime 14, stime 15 (proc(5)).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", p.cmd.Process.Pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(u+s) * time.Second / userHZ, nil
}

// hwm is the process's peak RSS (VmHWM) in KiB.
func (p proc) hwm() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmHWM")
}

func run(bin string, rate int, phase, idle, interval time.Duration, maxCPU float64) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("-epwindow %s: %w (make build writes it)", bin, err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	app := exec.Command(self, "-serve")
	appIn, err := app.StdinPipe()
	if err != nil {
		return err
	}
	appOut, err := app.StdoutPipe()
	if err != nil {
		return err
	}
	app.Stderr = os.Stderr
	if err := app.Start(); err != nil {
		return err
	}
	defer func() { appIn.Close(); _ = app.Wait() }()
	addr, err := bufio.NewReader(appOut).ReadString('\n')
	if err != nil {
		return fmt.Errorf("app server: %w", err)
	}
	addr = strings.TrimSpace(addr)
	_, port, _ := net.SplitHostPort(addr)

	dir, err := os.MkdirTemp("", "benchsidecar")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	record := filepath.Join(dir, "termination-log")
	var sidecarLog bytes.Buffer
	sc := exec.Command(bin, "sidecar", "--port", port, "--listen", "127.0.0.1:0", "--pod-name", "bench",
		"--interval", interval.String(), "--max-cpu", strconv.FormatFloat(maxCPU, 'g', -1, 64), "--termination-log", record)
	sc.Stderr = &sidecarLog
	if err := sc.Start(); err != nil {
		return err
	}
	scDone := make(chan error, 1)
	go func() { scDone <- sc.Wait() }()
	defer func() { _ = sc.Process.Kill() }()

	procs := []proc{{app, "app server"}, {sc, "sidecar"}}
	fmt.Printf("epwindow sidecar --interval %s --max-cpu %g beside a net/http server on loopback at %d req/s; CPU as a share of one core\n\n", interval, maxCPU, rate)
	fmt.Printf("%-16s %8s %9s %7s %11s %12s %15s\n", "phase", "seconds", "requests", "failed", "server CPU", "sidecar CPU", "sidecar/server")
	phases := []struct {
		name      string
		d         time.Duration
		keepAlive bool
		load      bool
	}{
		{"idle", idle, false, false},
		{"keep-alive", phase, true, true},
		{"new connection", phase, false, true},
	}
	for _, ph := range phases {
		before := make([]time.Duration, len(procs))
		for i, p := range procs {
			if before[i], err = p.cpu(); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
		}
		start := time.Now()
		var ok, failed int64
		if ph.load {
			ok, failed = load("http://"+addr+"/", rate, ph.d, ph.keepAlive)
		} else {
			time.Sleep(ph.d)
		}
		secs := time.Since(start).Seconds()
		used := make([]float64, len(procs))
		for i, p := range procs {
			c, err := p.cpu()
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			used[i] = (c - before[i]).Seconds() / secs
		}
		ratio := "-"
		if used[0] > 0 {
			ratio = fmt.Sprintf("%.2f", used[1]/used[0])
		}
		fmt.Printf("%-16s %8.1f %9d %7d %10.1f%% %11.1f%% %15s\n", ph.name, secs, ok, failed, 100*used[0], 100*used[1], ratio)
	}
	fmt.Println()
	for _, p := range procs {
		h, err := p.hwm()
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Printf("%-12s peak RSS (VmHWM) %6.1f MiB\n", p.name, float64(h)/1024)
	}

	if err := sc.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-scDone:
		if err != nil {
			return fmt.Errorf("sidecar: %w\n%s", err, sidecarLog.String())
		}
	case <-time.After(30 * time.Second):
		return errors.New("sidecar did not exit within 30 s of SIGTERM")
	}
	b, err := os.ReadFile(record)
	if err != nil {
		return err
	}
	tl, err := sidecar.ParseTimeline(b)
	if err != nil {
		return err
	}
	p := tl.Poll
	unseen := "?"
	if tl.UnseenConnections != nil {
		unseen = strconv.FormatInt(*tl.UnseenConnections, 10)
	}
	fmt.Printf("\nsidecar record: %d polls (%d failed, %d interrupted), a dump %s mean / %s max, longest gap %s, %d sockets in the last dump\n",
		p.Polls, p.Errors, p.Interrupted, time.Duration(p.MeanReadNS).Round(time.Microsecond), time.Duration(p.MaxReadNS).Round(time.Microsecond),
		time.Duration(p.MaxGapNS).Round(time.Microsecond), p.Sockets)
	fmt.Printf("connections on the app's port seen %d; PassiveOpens (namespace-wide, other processes' included) %d; unseen %s\n",
		tl.Accepts, tl.PassiveOpens, unseen)
	return nil
}

// load sends rate requests a second to url for d from 32 workers, paced
// by the millisecond, and returns how many answered 200 and how many
// failed (or were not sent: every worker busy).
func load(url string, rate int, d time.Duration, keepAlive bool) (ok, failed int64) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableKeepAlives: !keepAlive}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var nOK, nFail atomic.Int64
	tokens := make(chan struct{}, rate)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tokens {
				resp, err := client.Get(url)
				if err != nil {
					nFail.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					nOK.Add(1)
				} else {
					nFail.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	sent := 0
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case now := <-tick.C:
			due := int(now.Sub(start).Seconds() * float64(rate))
			for ; sent < due; sent++ {
				select {
				case tokens <- struct{}{}:
				default:
					nFail.Add(1) // every worker busy and the queue full
				}
			}
		}
	}
	tick.Stop()
	close(tokens)
	wg.Wait()
	return nOK.Load(), nFail.Load()
}
