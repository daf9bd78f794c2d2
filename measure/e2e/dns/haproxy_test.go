package dns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// resolveEvery is HAProxy's `timeout resolve` in this test: how often it
// asks CoreDNS again (src/resolvers.c, resolv_resolution_timeout returns
// resolvers->timeout.resolve; a resolution waits that long after the last
// one). The test's own value, not HAProxy's 1 s default, so that the
// delay's spread can only come from it.
const resolveEvery = 3 * time.Second

// startHAProxy runs Debian's HAProxy (make deps) in front of the headless
// Service name: a server-template whose slots resolve it through CoreDNS
// every resolveEvery, and a stats socket for the observer. It returns the
// frontend's URL and the socket's.
func startHAProxy(t *testing.T, fqdn string) (frontend, socket string) {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("no haproxy on PATH: run make deps (Debian's haproxy): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	socket = filepath.Join(dir, "admin.sock")
	// Six slots: three replicas and the replacement a deletion brings.
	cfg := fmt.Sprintf(`global
    stats socket %s mode 600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 10s
    timeout server 10s
resolvers coredns
    nameserver coredns %s
    accepted_payload_size 8192
    timeout resolve %dms
    timeout retry 1s
frontend probe
    bind %s
    default_backend probe
backend probe
    balance roundrobin
    server-template srv 6 %s:%d resolvers coredns init-addr none resolve-prefer ipv4
`, socket, cluster.DNSDirect, resolveEvery.Milliseconds(), addr, fqdn, deploy.DefaultPort)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy made no stats socket in 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr, "unix://" + socket
}

// HAProxy from Debian, in front of a headless Service it resolves through
// CoreDNS (server-template + resolvers), is the DNS path's consumer:
// --observer haproxy reads `show servers state` over its stats socket, so
// upstream_removed is when HAProxy stopped sending new traffic to the
// deleted pod, and the load goes through HAProxy.
//
// Ground truth: CoreDNS drops the address at slice_not_ready (no cache,
// TestDNSRemovedFollowsTheSlice), HAProxy asks again every resolveEvery
// and then takes the slot's address (RMAINT). So slice_not_ready→
// upstream_removed lies within [−Slack, resolveEvery + Interval + Slack];
// with the deletions spread over one resolveEvery (--trial-jitter,
// stratified) each lands at a uniformly random phase of HAProxy's cycle,
// and the largest of 5 stays within Interval + Slack (what the DNS answer
// alone allows) only with probability (0.35/3)^5 ≈ 2·10^-5. The probe's
// last request came through HAProxy, so it lies within the observer's
// bracket: no later than upstream_removed (+ the skew bound), no earlier
// than the last poll that listed it less one request gap (100 req/s over
// three or four servers: ≤ 40 ms; 100 ms allowed).
//
// The headless Service is the test's own, with a name HAProxy's
// configuration can hold before measure runs (measure's is named after its
// run id); it selects the same pods in measure's namespace, and --dns-name
// makes measure time the same name HAProxy resolves.
//
// Five trials, as TestDNSRemovedFollowsTheSlice, at about 15 s each.
func TestHAProxyFollowsDNS(t *testing.T) {
	ctx := context.Background()
	ns := "epwindow-haproxy"
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dnsprobe"}, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone,
		Selector:  map[string]string{deploy.LabelName: deploy.NameValue},
		Ports:     []corev1.ServicePort{{Port: deploy.DefaultPort}},
	}}
	if _, err := cluster.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fqdn := upstream.DNSName(svc.Name, ns, "")
	frontend, socket := startHAProxy(t, fqdn)

	cfg := Config(t, cluster, 5)
	cfg.Namespace = ns
	cfg.DNSOptions.Name = fqdn
	u, err := cfg.URL.Parse(frontend)
	if err != nil {
		t.Fatal(err)
	}
	cfg.URL, cfg.Host = u, ""
	cfg.Observer = upstream.KindHAProxy
	cfg.ObserverOptions = upstream.Options{Interval: Interval, URLs: []string{socket}, HAProxyBackend: "probe"}
	cfg.TrialJitter = resolveEvery
	sink := e2etest.Run(t, cfg, 10*time.Minute)

	key := upstream.KindHAProxy + "/" + socket
	var delays []time.Duration
	for _, r := range sink.Records {
		if !r.Valid {
			t.Errorf("trial %d invalid: %s", r.Trial, r.InvalidReason())
			continue
		}
		rm, ok := r.StageKey(results.StageUpstreamRemoved, key)
		lp, ok2 := r.StageKey(results.StageUpstreamLastSeen, key)
		nr, ok3 := r.Stage(results.StageSliceNotReady)
		last, ok4 := r.Stage(results.StageLastRequest)
		if !ok || !ok2 || !ok3 || !ok4 {
			t.Errorf("trial %d: missing stages (%s %v, %s %v, slice_not_ready %v, last_request %v)", r.Trial,
				results.StageUpstreamRemoved, ok, results.StageUpstreamLastSeen, ok2, ok3, ok4)
			continue
		}
		d := rm.At.Sub(nr.At)
		delays = append(delays, d)
		if d < -Slack || d > resolveEvery+Interval+Slack {
			t.Errorf("trial %d: slice_not_ready→upstream_removed = %s, want within [%s, %s]", r.Trial, d, -Slack, resolveEvery+Interval+Slack)
		}
		skew := time.Duration(r.SkewUncertaintyNS)
		if last.At.After(rm.At.Add(skew)) || last.At.Before(lp.At.Add(-100*time.Millisecond-skew)) {
			t.Errorf("trial %d: last_request %s outside HAProxy's bracket [%s − 100ms, %s] (skew ±%s)", r.Trial,
				last.At.Format(time.StampMicro), lp.At.Format(time.StampMicro), rm.At.Format(time.StampMicro), skew)
		}
		if _, ok := r.Stage(results.StageDNSRemoved); !ok {
			t.Errorf("trial %d: no dns_removed", r.Trial)
		}
	}
	t.Logf("slice_not_ready→upstream_removed through HAProxy (timeout resolve %s): %v", resolveEvery, delays)
	if len(delays) > 0 && slices.Max(delays) <= Interval+Slack {
		t.Errorf("largest delay %s: HAProxy's %s resolution cycle does not show", slices.Max(delays), resolveEvery)
	}
}
