package upstream

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// haproxyState is `show servers state b` as HAProxy 2.6 (Debian 12) prints
// it for a server-template of 6 slots resolving a headless Service: srv1
// and srv2 hold addresses and run; srv3's address left the DNS answer
// (RMAINT, 0x20, address kept); srv4 was never filled ("-"); srv5 is
// draining (admin 0x08); srv6 is running with weight 0.
const haproxyState = `1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 b 1 srv1 10.244.1.5 2 0 1 1 12 1 0 0 0 0 0 0 probe-headless.ns.svc.cluster.local 8080 - 0 0 - - 0
3 b 2 srv2 10.244.2.7 2 0 1 1 12 1 0 0 0 0 0 0 probe-headless.ns.svc.cluster.local 8080 - 0 0 - - 0
3 b 3 srv3 10.244.1.9 0 32 1 1 3 1 0 0 0 0 0 0 probe-headless.ns.svc.cluster.local 8080 - 0 0 - - 0
3 b 4 srv4 - 0 32 1 1 40 1 0 0 0 0 0 0 probe-headless.ns.svc.cluster.local 8080 - 0 0 - - 0
3 b 5 srv5 10.244.2.8 2 8 1 1 12 1 0 0 0 0 0 0 probe-headless.ns.svc.cluster.local 8080 - 0 0 - - 0
3 b 6 srv6 10.244.2.9 2 0 0 1 12 1 0 0 0 0 0 0 probe-headless.ns.svc.cluster.local 8080 - 0 0 - - 0

`

func TestUpstreamsFromHAProxy(t *testing.T) {
	got, err := upstreamsFromHAProxy([]byte(haproxyState))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:8080"), netip.MustParseAddrPort("10.244.2.7:8080")}
	if !sameAddrs(got, want) {
		t.Errorf("upstreams %v, want %v (only running, unfenced, weighted servers with an address)", got, want)
	}
	// Fields are found by the header: another order parses the same.
	lines := strings.Split(haproxyState, "\n")
	swap := func(l string) string {
		f := strings.Fields(strings.TrimPrefix(l, "# "))
		f[4], f[18] = f[18], f[4]
		out := strings.Join(f, " ")
		if strings.HasPrefix(l, "# ") {
			out = "# " + out
		}
		return out
	}
	for i := 1; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "" {
			lines[i] = swap(lines[i])
		}
	}
	if got, err := upstreamsFromHAProxy([]byte(strings.Join(lines, "\n"))); err != nil || !sameAddrs(got, want) {
		t.Errorf("reordered fields: %v, %v", got, err)
	}
	for _, bad := range []string{"Can't find backend.\n", "Permission denied\n", "1\n3 b 1 srv1 10.244.1.5 2 0 1\n", ""} {
		if _, err := upstreamsFromHAProxy([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// An empty backend lists nothing, and is a reading.
	if got, err := upstreamsFromHAProxy([]byte(strings.Join(strings.Split(haproxyState, "\n")[:2], "\n"))); err != nil || len(got) != 0 {
		t.Errorf("no servers: %v, %v", got, err)
	}
}

// serveHAProxy answers each connection's one command like the stats socket
// and records it.
func serveHAProxy(t *testing.T, l net.Listener, answer string) <-chan string {
	got := make(chan string, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			got <- strings.TrimSpace(line)
			_, _ = c.Write([]byte(answer))
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return got
}

func TestHAProxyObserverReadsTheSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ucmds, tcmds := serveHAProxy(t, ul, haproxyState), serveHAProxy(t, tl, haproxyState)
	obs, _, err := New(context.Background(), KindHAProxy, Deps{}, Target{}, Options{
		Interval: 100 * time.Millisecond, URLs: []string{"unix://" + sock, "tcp://" + tl.Addr().String()}, HAProxyBackend: "b"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := obs.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Replicas {
		if r.Err != nil || len(r.Upstreams) != 2 || r.Bytes == 0 {
			t.Errorf("replica %s: %+v", r.Replica, r)
		}
	}
	for _, ch := range []<-chan string{ucmds, tcmds} {
		if cmd := <-ch; cmd != "show servers state b" {
			t.Errorf("command %q", cmd)
		}
	}
	// No socket there: a blind reading naming the flag.
	gone, _, err := New(context.Background(), KindHAProxy, Deps{}, Target{}, Options{URLs: []string{"unix://" + sock + ".nope"}})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ = gone.Poll(context.Background())
	if r := snap.Replicas[0]; r.Err == nil || !strings.Contains(r.Err.Error(), "--observer-url") {
		t.Errorf("missing socket: %+v", r)
	}
}

func TestHAProxyObserverBadInput(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, "needs --observer-url"},
		{Options{URLs: []string{"http://127.0.0.1:9000"}}, "unix:///path or tcp://host:port"},
		{Options{URLs: []string{"tcp://127.0.0.1"}}, "tcp://host:port"},
		{Options{URLs: []string{"unix:///run/haproxy/admin.sock"}, HAProxyBackend: "a b"}, "--haproxy-backend"},
	} {
		if _, _, err := New(context.Background(), KindHAProxy, Deps{}, Target{}, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.opts, err, tc.want)
		}
	}
}
