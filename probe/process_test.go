package probe

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is `epwindow`, built once by TestMain for the process-level tests;
// buildErr says why not.
var (
	binary   string
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "epwindow-probe-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// World-readable, so the probe can run as an unprivileged user.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "epwindow")
	out, err := exec.Command("go", "build", "-o", binary, "github.com/epwindow/epwindow/cmd/epwindow").CombinedOutput()
	if err != nil {
		buildErr = fmt.Errorf("go build ./cmd/epwindow: %v\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running `epwindow probe`.
type proc struct {
	cmd     *exec.Cmd
	addr    string
	termLog string
	logs    chan map[string]any
	done    chan struct{} // closed when the process has exited
	mu      sync.Mutex
	stderr  []string
	exitErr error
}

// startProbe runs `epwindow probe` on a free loopback port, as an
// unprivileged user when the test runs as root (the probe must not need
// root), and waits for its "started" log line to learn the port.
func startProbe(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startProbeIn(t, false, env, args...)
}

// readOnlyRootScript runs its arguments as nobody in the mount namespace
// that `unshare -m` made, with every mount remounted read-only except the
// termination log (bind-mounted onto itself first, as the kubelet does). It
// refuses to run the probe if the root or the temp dir is still writable.
const readOnlyRootScript = `set -e
termlog=$1; shift
mount --make-rprivate /
mount --bind "$termlog" "$termlog"
findmnt -rn -o TARGET | sort -r | while read -r m; do
	[ "$m" = "$termlog" ] || mount -o remount,bind,ro "$m" 2>/dev/null || true
done
for d in / /tmp "$(dirname "$termlog")"; do
	if touch "$d/.epwindow-rw-check" 2>/dev/null; then
		echo "$d is still writable in the test's mount namespace" >&2
		exit 90
	fi
done
exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
`

// startProbeIn is startProbe, with readOnlyRoot running the probe in a
// read-only root filesystem (see readOnlyRootScript).
func startProbeIn(t *testing.T, readOnlyRoot bool, env []string, args ...string) *proc {
	t.Helper()
	p := launchProbe(t, readOnlyRoot, env, args...)
	started := p.waitLog(t, "started")
	p.addr, _ = started["addr"].(string)
	if p.addr == "" {
		t.Fatalf("no addr in the started log line: %v", started)
	}
	return p
}

// launchProbe runs `epwindow probe` as startProbeIn does, without waiting
// for it to listen.
func launchProbe(t *testing.T, readOnlyRoot bool, env []string, args ...string) *proc {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("the process-level tests need the epwindow binary: %v", buildErr)
	}
	dir := t.TempDir()
	p := &proc{
		termLog: filepath.Join(dir, "termination-log"),
		logs:    make(chan map[string]any, 100),
		done:    make(chan struct{}),
	}
	// Like the kubelet: the file exists and is the only writable path.
	if err := os.WriteFile(p.termLog, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(p.termLog, 0o666); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"probe", "--listen", "127.0.0.1:0", "--termination-log", p.termLog}, args...)
	p.cmd = exec.Command(binary, args...)
	switch {
	case readOnlyRoot:
		if os.Geteuid() != 0 {
			t.Fatal("the read-only root test needs root to make a mount namespace: run the tests as root (CI does)")
		}
		for _, tool := range []string{"unshare", "setpriv", "findmnt", "mount"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Fatalf("the read-only root test needs %s: apt-get install util-linux mount", tool)
			}
		}
		requireTraversable(t, binary, p.termLog)
		sh := append([]string{"-m", "sh", "-c", readOnlyRootScript, "sh", p.termLog, binary}, args...)
		p.cmd = exec.Command("unshare", sh...)
	case os.Geteuid() == 0:
		requireTraversable(t, binary, p.termLog)
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	p.cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr = append(p.stderr, line)
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil {
				select {
				case p.logs <- m:
				default: // nobody is reading that far ahead
				}
			}
		}
		io.Copy(io.Discard, stderr)
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// requireTraversable fails unless an unprivileged user can reach paths: the
// tests run the probe as nobody when they run as root.
func requireTraversable(t *testing.T, paths ...string) {
	t.Helper()
	for _, path := range paths {
		for d := filepath.Dir(path); ; d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o001 == 0 {
				t.Fatalf("%s is not traversable by other users, so the probe cannot run as nobody; set TMPDIR to a directory under /tmp", d)
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
}

func (p *proc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

// waitLog waits for the next log line with this msg.
func (p *proc) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case m := <-p.logs:
			if m["msg"] == msg {
				return m
			}
		case <-p.done:
			// Drain what was logged before the exit.
			for {
				select {
				case m := <-p.logs:
					if m["msg"] == msg {
						return m
					}
				default:
					t.Fatalf("probe exited (%v) before logging %q; stderr:\n%s", p.exitErr, msg, p.stderrText())
				}
			}
		case <-timeout:
			t.Fatalf("no %q log line; stderr:\n%s", msg, p.stderrText())
		}
	}
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to within for the process to end and requires exit 0.
func (p *proc) waitExit(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("probe still running after %s; stderr:\n%s", within, p.stderrText())
	}
	if p.exitErr != nil {
		t.Fatalf("probe exit: %v, want exit code 0; stderr:\n%s", p.exitErr, p.stderrText())
	}
}

func (p *proc) termination(t *testing.T) Timeline {
	t.Helper()
	b, err := os.ReadFile(p.termLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxTerminationMessage {
		t.Errorf("termination message is %d bytes, over %d", len(b), MaxTerminationMessage)
	}
	tl, err := ParseTimeline(b)
	if err != nil {
		t.Fatalf("termination log: %v; stderr:\n%s", err, p.stderrText())
	}
	return tl
}

// rawConn is one client TCP connection, so that the test knows exactly
// which requests share a connection.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialProbe(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

// do sends one request and reads its response; sent and received bracket it
// on this machine's wall clock (the probe's clock too).
func (rc *rawConn) do(t *testing.T, method, path string) (resp *http.Response, body string, sent, received time.Time) {
	t.Helper()
	rc.c.SetDeadline(time.Now().Add(waitTimeout))
	sent = time.Now()
	if _, err := fmt.Fprintf(rc.c, "%s %s HTTP/1.1\r\nHost: probe\r\nContent-Length: 0\r\n\r\n", method, path); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, err := io.ReadAll(resp.Body)
	received = time.Now()
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp, string(b), sent, received
}

func (rc *rawConn) expect(t *testing.T, method, path string, code int) {
	t.Helper()
	resp, body, _, _ := rc.do(t, method, path)
	if resp.StatusCode != code {
		t.Fatalf("%s %s = %d %q, want %d", method, path, resp.StatusCode, body, code)
	}
}

func TestProcessHoldsAfterSigtermUntilReleased(t *testing.T) {
	p := startProbe(t, nil, "--pod-name", "probe-hold", "--hold", "60s")

	// Before SIGTERM: a keep-alive traffic connection and a health check.
	keep := dialProbe(t, p.addr)
	resp, body, sent, received := keep.do(t, http.MethodGet, "/before")
	pod, ns, ok := ParseTrafficBody([]byte(body))
	if resp.StatusCode != 200 || !ok || string(pod) != "probe-hold" {
		t.Fatalf("GET /before = %d %q, want 200 and the traffic body of probe-hold", resp.StatusCode, body)
	}
	// Same machine, same wall clock, no offset: the probe's time lies
	// between send and receive.
	if ns < sent.UnixNano() || ns > received.UnixNano() {
		t.Errorf("time in the body = %d, want unix ns within [%d, %d]", ns, sent.UnixNano(), received.UnixNano())
	}
	hc := dialProbe(t, p.addr)
	hc.expect(t, http.MethodGet, PathHealthz, 200)
	hc.c.Close()

	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "sigterm")

	// After SIGTERM: NEW connections are accepted and served.
	fresh := dialProbe(t, p.addr)
	for i := 0; i < 3; i++ {
		fresh.expect(t, http.MethodGet, fmt.Sprintf("/after/%d", i), 200)
	}
	keep.expect(t, http.MethodGet, "/before-conn-after-sigterm", 200)
	hc2 := dialProbe(t, p.addr)
	hc2.expect(t, http.MethodGet, PathHealthz, http.StatusServiceUnavailable)
	tlc := dialProbe(t, p.addr)
	_, tlBody, _, _ := tlc.do(t, http.MethodGet, PathTimeline)
	live, err := ParseTimeline([]byte(tlBody))
	if err != nil {
		t.Fatal(err)
	}
	if live.Sigterm == nil || live.Released != nil || live.Exit != nil {
		t.Errorf("live timeline during hold: sigterm %v released %v exit %v", live.Sigterm, live.Released, live.Exit)
	}
	if p.exited() {
		t.Fatal("probe exited during the hold")
	}

	rel := dialProbe(t, p.addr)
	rel.expect(t, http.MethodPost, PathRelease, 200)
	p.waitLog(t, "released")
	p.waitExit(t, waitTimeout)

	tl := p.termination(t)
	if tl.Pod != "probe-hold" || tl.Sigterm == nil || tl.Released == nil || tl.Exit == nil || tl.HoldExpired != nil {
		t.Fatalf("termination timeline: pod %q sigterm %v released %v exit %v hold_expired %v",
			tl.Pod, tl.Sigterm, tl.Released, tl.Exit, tl.HoldExpired)
	}
	if tl.Released.Before(*tl.Sigterm) || tl.Exit.Before(*tl.Released) {
		t.Errorf("out of order: sigterm %s released %s exit %s", tl.Sigterm, tl.Released, tl.Exit)
	}
	// Connections: keep, hc before; fresh, hc2, tlc, rel after.
	// Requests: 2 before; 3 + 1 + 1 + 1 + 1 after, of which 4 traffic.
	eqInt(t, "Accepts", tl.Accepts, 6)
	eqInt(t, "AcceptsAfterSigterm", tl.AcceptsAfterSigterm, 4)
	eqInt(t, "Requests", tl.Requests, 9)
	eqInt(t, "RequestsAfterSigterm", tl.RequestsAfterSigterm, 7)
	eqInt(t, "TrafficAccepts", tl.TrafficAccepts, 2)
	eqInt(t, "TrafficAcceptsAfterSigterm", tl.TrafficAcceptsAfterSigterm, 1)
	eqInt(t, "TrafficRequests", tl.TrafficRequests, 5)
	eqInt(t, "TrafficRequestsAfterSigterm", tl.TrafficRequestsAfterSigterm, 4)
	if tl.LastTrafficAccept == nil || tl.LastTrafficAccept.Before(*tl.Sigterm) {
		t.Errorf("LastTrafficAccept = %v, want the connection accepted after SIGTERM (%s)", tl.LastTrafficAccept, tl.Sigterm)
	}
	if len(tl.Peers) != 1 || tl.Peers[0].Addr != "127.0.0.1" || tl.Peers[0].Accepts != 6 {
		t.Errorf("Peers = %+v, want 127.0.0.1 with 6 accepts", tl.Peers)
	}
	p.waitLog(t, "exit")
}

func TestProcessExitOnSigtermRefusesNewConnections(t *testing.T) {
	p := startProbe(t, nil, "--pod-name", "probe-fast", "--hold", "60s", "--exit-on-sigterm")
	dialProbe(t, p.addr).expect(t, http.MethodGet, "/", 200)

	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "sigterm") // logged once the listener is closed
	_, err := net.DialTimeout("tcp", p.addr, waitTimeout)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial right after SIGTERM: %v, want connection refused", err)
	}
	// It does not hold: the exit comes long before --hold (60s) would end.
	p.waitExit(t, waitTimeout)
	tl := p.termination(t)
	if tl.Sigterm == nil || tl.Exit == nil || tl.Released != nil || tl.HoldExpired != nil {
		t.Errorf("termination timeline: sigterm %v exit %v released %v hold_expired %v", tl.Sigterm, tl.Exit, tl.Released, tl.HoldExpired)
	}
	eqInt(t, "TrafficRequests", tl.TrafficRequests, 1)
	eqInt(t, "AcceptsAfterSigterm", tl.AcceptsAfterSigterm, 0)
}

func TestProcessListenDelayRefusesUntilOpen(t *testing.T) {
	// A port known before the probe listens on it: the test must dial it
	// during the delay.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const delay = 2 * time.Second
	p := launchProbe(t, false, nil, "--pod-name", "probe-late", "--hold", "0s",
		"--listen", addr, "--listen-delay", delay.String())

	// Logged just before the delay starts: a dial right after it comes well
	// inside the 2 s, and must be refused, the readiness probe's /healthz
	// like any other.
	p.waitLog(t, "waiting to listen")
	if _, err := net.DialTimeout("tcp", addr, waitTimeout); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial during --listen-delay: %v, want connection refused", err)
	}
	started := p.waitLog(t, "started")
	if got, _ := started["addr"].(string); got != addr {
		t.Fatalf("started on %q, want --listen %q", got, addr)
	}
	c := dialProbe(t, addr)
	c.expect(t, http.MethodGet, PathHealthz, 200)
	c.expect(t, http.MethodGet, "/", 200)
	p.signal(t, syscall.SIGTERM)
	p.waitExit(t, waitTimeout)

	tl := p.termination(t)
	if tl.ListenerOpen == nil || tl.FirstTrafficRequest == nil {
		t.Fatalf("termination timeline: listener_open %v first_traffic_request %v, want both", tl.ListenerOpen, tl.FirstTrafficRequest)
	}
	// Go timers never fire early; both stamps are the probe's clock.
	if d := tl.ListenerOpen.Sub(tl.Started); d < delay {
		t.Errorf("listener opened %s after the start, want at least --listen-delay (%s)", d, delay)
	}
	if tl.FirstTrafficRequest.Before(*tl.ListenerOpen) {
		t.Errorf("first traffic request %s before the listener opened %s", tl.FirstTrafficRequest, tl.ListenerOpen)
	}
}

func TestProcessIgnoreSigtermServesUntilKilled(t *testing.T) {
	p := startProbe(t, nil, "--pod-name", "probe-deaf", "--hold", "0s", "--ignore-sigterm")
	c := dialProbe(t, p.addr)
	c.expect(t, http.MethodGet, "/", 200)
	// SIGTERM twice, as a kubelet never does but a user might: both ignored.
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "sigterm")
	p.signal(t, syscall.SIGTERM)
	// --hold 0s would have ended a normal probe at once; this one still
	// accepts new connections and stays ready.
	dialProbe(t, p.addr).expect(t, http.MethodGet, "/", 200)
	dialProbe(t, p.addr).expect(t, http.MethodGet, "/healthz", 200)
	if p.exited() {
		t.Fatal("the probe exited after SIGTERM with --ignore-sigterm")
	}
	// Only SIGKILL (the kubelet's, at the end of the grace period) ends it.
	p.signal(t, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		t.Fatal("probe still running after SIGKILL")
	}
	var ee *exec.ExitError
	if !errors.As(p.exitErr, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("exit = %v, want killed by SIGKILL", p.exitErr)
	}
}

func TestProcessHoldExpiresByItself(t *testing.T) {
	// POD_NAME from the environment, as the downward API sets it.
	p := startProbe(t, []string{"POD_NAME=probe-from-env"}, "--hold", "1s")
	dialProbe(t, p.addr).expect(t, http.MethodGet, "/", 200)
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "hold expired")
	p.waitExit(t, waitTimeout)

	tl := p.termination(t)
	if tl.Pod != "probe-from-env" {
		t.Errorf("Pod = %q, want POD_NAME's value", tl.Pod)
	}
	if tl.Sigterm == nil || tl.HoldExpired == nil || tl.Released != nil || tl.Exit == nil {
		t.Fatalf("termination timeline: sigterm %v hold_expired %v released %v exit %v", tl.Sigterm, tl.HoldExpired, tl.Released, tl.Exit)
	}
	// Go timers never fire early, and both stamps are the probe's clock.
	if held := tl.HoldExpired.Sub(*tl.Sigterm); held < time.Second {
		t.Errorf("held %s after SIGTERM, want at least --hold (1s)", held)
	}
}

func TestProcessSecondSignalStopsAtOnce(t *testing.T) {
	p := startProbe(t, nil, "--pod-name", "probe-twice", "--hold", "60s")
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "sigterm")
	p.signal(t, os.Interrupt)
	p.waitExit(t, waitTimeout)
	tl := p.termination(t)
	if tl.Sigterm == nil || tl.Exit == nil || tl.Released != nil || tl.HoldExpired != nil {
		t.Errorf("termination timeline: sigterm %v exit %v released %v hold_expired %v", tl.Sigterm, tl.Exit, tl.Released, tl.HoldExpired)
	}
}

func TestProcessUnwritableTerminationLogIsNotFatal(t *testing.T) {
	p := startProbe(t, nil, "--pod-name", "probe-ro", "--hold", "0s",
		"--termination-log", filepath.Join(t.TempDir(), "no-such-dir", "termination-log"))
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "termination message not written")
	p.waitExit(t, waitTimeout)
}

func TestProcessReadOnlyRootAsNobody(t *testing.T) {
	p := startProbeIn(t, true, nil, "--pod-name", "probe-ro-root", "--hold", "60s")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "\nUid:\t65534\t65534\t65534\t65534\n") {
		t.Fatalf("probe is not running as nobody:\n%s", status)
	}
	dialProbe(t, p.addr).expect(t, http.MethodGet, "/", 200)
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "sigterm")
	dialProbe(t, p.addr).expect(t, http.MethodGet, "/after", 200)
	dialProbe(t, p.addr).expect(t, http.MethodPost, PathRelease, 200)
	p.waitExit(t, waitTimeout)
	if strings.Contains(p.stderrText(), "termination message not written") {
		t.Errorf("termination log not written:\n%s", p.stderrText())
	}
	tl := p.termination(t)
	if tl.Pod != "probe-ro-root" || tl.Released == nil {
		t.Errorf("termination timeline: pod %q released %v", tl.Pod, tl.Released)
	}
	eqInt(t, "TrafficAcceptsAfterSigterm", tl.TrafficAcceptsAfterSigterm, 1)
}

func TestProcessBadFlagsExit2(t *testing.T) {
	if buildErr != nil {
		t.Fatalf("the process-level tests need the epwindow binary: %v", buildErr)
	}
	out, err := exec.Command(binary, "probe", "--pod-name", "p", "--hold", "-1s").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--hold") {
		t.Errorf("bad --hold: err %v, output %q; want exit 2 naming --hold", err, out)
	}
}
