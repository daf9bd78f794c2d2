package nodeagent

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testNetConfig uses its own prefix and CIDR so that the test never touches
// a local cluster running at the same time (prefix epw, 10.244.0.0/16).
func testNetConfig(t testing.TB) Config {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates network namespaces and a bridge: run it as root")
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(DefaultCNIBinDir, p)); err != nil {
			t.Fatalf("CNI plugin %s missing: apt-get install containernetworking-plugins (%v)", p, err)
		}
	}
	return Config{
		Nodes:    []string{"tn0", "tn1"},
		StateDir: t.TempDir(),
		PodCIDR:  "10.247.0.0/16",
		Prefix:   "epwt",
	}.withDefaults()
}

// leftovers lists what the prefix still owns on the machine.
func leftovers(t testing.TB, cfg Config) []string {
	t.Helper()
	var out []string
	nss, err := listNetns(cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, nss...)
	links, err := listLinks(context.Background(), cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, links...)
	routes, err := ourRoutes(context.Background(), cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		out = append(out, "route "+r)
	}
	if _, err := os.Stat(cniDir(cfg)); err == nil {
		out = append(out, cniDir(cfg))
	}
	// Container processes of the agent tests (argv[0] is the command).
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), "/bin/testapp\x00"+testAppArg) {
			out = append(out, "process "+p)
		}
	}
	return out
}

// bridgeAddr is the bridge's MAC address as the kernel has it.
func bridgeAddr(t *testing.T, cfg Config) string {
	t.Helper()
	b, err := os.ReadFile("/sys/class/net/" + cfg.bridgeName() + "/address")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func routeGet(t *testing.T, addr string) string {
	t.Helper()
	out, err := exec.Command("ip", "route", "get", addr).CombinedOutput()
	if err != nil {
		return string(out) // the error text is the answer for unreachable routes
	}
	return string(out)
}

func TestPodNetworkAddDel(t *testing.T) {
	cfg := testNetConfig(t)
	if err := CleanupStale(cfg.Prefix); err != nil {
		t.Fatalf("cleanup before test: %v", err)
	}
	t.Cleanup(func() { _ = TeardownNetwork(cfg) })
	if err := SetupNetwork(cfg); err != nil {
		t.Fatalf("SetupNetwork: %v", err)
	}
	// An address of the pod CIDR outside every node subnet is unreachable.
	// The kernel answers EHOSTUNREACH ("No route to host") for it.
	if got := routeGet(t, "10.247.200.9"); !strings.Contains(got, "No route to host") {
		t.Fatalf("route to 10.247.200.9 = %q, want unreachable", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newPodNetwork(cfg)
	brMAC := bridgeAddr(t, cfg)
	const uid = "0b5e6a7c-1111-2222-3333-444455556666"
	nsPath, ip, err := n.add(ctx, "tn1", uid)
	if err != nil {
		t.Fatalf("CNI ADD: %v", err)
	}
	// The bridge keeps its own MAC when a port joins: without an address
	// set on it, the kernel gives it the lowest MAC of its ports, which with
	// one port is that veth's (random) one, so this fails without the fix.
	if got := bridgeAddr(t, cfg); got != brMAC || got != bridgeMAC(cfg.Prefix).String() {
		t.Fatalf("bridge MAC %s after a pod's veth joined, was %s, want %s always", got, brMAC, bridgeMAC(cfg.Prefix))
	}
	if want := netip.MustParsePrefix("10.247.1.0/24"); !want.Contains(ip) || ip == gateway(want) {
		t.Fatalf("pod address %v not a pod address of node tn1's subnet %v", ip, want)
	}
	if !linkExists(vethName(cfg.Prefix, uid)) {
		t.Errorf("host veth %s missing", vethName(cfg.Prefix, uid))
	}

	// A server inside the pod's namespace, bound to the pod address, is
	// reachable from the root namespace; one on the pod's loopback is not
	// (that is what port-forward is for) but is from inside.
	var ln, lo net.Listener
	if err := inNetns(nsPath, func() error {
		var err error
		if ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String()); err != nil {
			return err
		}
		lo, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatalf("listen in pod namespace: %v", err)
	}
	defer ln.Close()
	defer lo.Close()
	go serveHello(ln)
	go serveHello(lo)
	if got := dialRead(t, nil, ln.Addr().String()); got != "hello" {
		t.Fatalf("read %q from pod address, want hello", got)
	}
	if got := dialRead(t, &nsPath, lo.Addr().String()); got != "hello" {
		t.Fatalf("read %q from pod loopback inside its namespace, want hello", got)
	}

	if err := n.del(ctx, "tn1", uid); err != nil {
		t.Fatalf("CNI DEL: %v", err)
	}
	if _, err := os.Stat(nsPath); !os.IsNotExist(err) {
		t.Errorf("namespace %s still exists after DEL (%v)", nsPath, err)
	}
	if linkExists(vethName(cfg.Prefix, uid)) {
		t.Errorf("veth %s still exists after DEL", vethName(cfg.Prefix, uid))
	}
	if err := TeardownNetwork(cfg); err != nil {
		t.Fatalf("TeardownNetwork: %v", err)
	}
	if l := leftovers(t, cfg); len(l) > 0 {
		t.Fatalf("left behind after teardown: %v", l)
	}
}

func TestCleanupStaleKillsAndRemoves(t *testing.T) {
	cfg := testNetConfig(t)
	if err := CleanupStale(cfg.Prefix); err != nil {
		t.Fatalf("cleanup before test: %v", err)
	}
	t.Cleanup(func() { _ = TeardownNetwork(cfg) })
	if err := SetupNetwork(cfg); err != nil {
		t.Fatalf("SetupNetwork: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const uid = "7f00aa00-1111-2222-3333-444455556666"
	nsPath, _, err := newPodNetwork(cfg).add(ctx, "tn0", uid)
	if err != nil {
		t.Fatalf("CNI ADD: %v", err)
	}
	// A process left inside the namespace, as after an agent crash.
	cmd := exec.Command("ip", "netns", "exec", filepath.Base(nsPath), "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitInNetns(t, cmd.Process.Pid, nsPath)

	if err := CleanupStale(cfg.Prefix); err != nil {
		t.Fatalf("CleanupStale: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("process in the stale namespace still runs 10s after CleanupStale")
	}
	// CleanupStale leaves files to the owner of the state dir.
	if err := os.RemoveAll(cniDir(cfg)); err != nil {
		t.Fatal(err)
	}
	if l := leftovers(t, cfg); len(l) > 0 {
		t.Fatalf("left behind after CleanupStale: %v", l)
	}
}

// waitInNetns waits until pid has entered the namespace at nsPath.
func waitInNetns(t *testing.T, pid int, nsPath string) {
	t.Helper()
	want, err := os.Stat(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got, err := os.Stat(filepath.Join("/proc", itoa(pid), "ns", "net")); err == nil && os.SameFile(got, want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d did not enter %s", pid, nsPath)
}

func serveHello(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("hello"))
		_ = c.Close()
	}
}

// dialRead dials addr (from inside nsPath when non-nil) and reads to EOF.
func dialRead(t *testing.T, nsPath *string, addr string) string {
	t.Helper()
	var c net.Conn
	dial := func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}
	var err error
	if nsPath != nil {
		err = inNetns(*nsPath, dial)
	} else {
		err = dial()
	}
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return string(b)
}
