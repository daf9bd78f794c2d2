package dns

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/results"
)

var cluster *localcluster.Cluster

// ttl is the kubernetes plugin's ttl this cluster runs with: neither
// kubeadm's 30 s nor the plugin's 5 s default, so that the header can show
// it only by reading CoreDNS's answers.
const ttl = 7 * time.Second

func TestMain(m *testing.M) {
	// kubeadm's Corefile otherwise: the cache plugin does not hold the
	// cluster domain's answers.
	localcluster.Main(m, "measure/e2e/dns", localcluster.Options{DNS: true, DNSTTL: ttl, HAProxy: true, HAProxyResolve: resolveEvery}, func(c *localcluster.Cluster) error {
		cluster = c
		return nil
	})
}

// With no cache on the cluster domain (kubeadm's Corefile), CoreDNS stops
// answering a deleted pod's address as soon as its informer sees the
// endpoint turn not ready: slice_not_ready→dns_removed lies within
// [−Slack, Interval + Slack] (the first poll after the change answers
// without it; Slack says what else lies between). The TTL only tells
// clients how long they may keep the old answer: the header reports the
// one CoreDNS sent, and no cache counted it down.
//
// checkDNSFollowsTheSlice checks it on a run's trials: the gRPC client
// runs (TestGRPCClientLeavesWithItsConnection) carry the dns observer too,
// and their six deletions check each bound on its own (no statistic is
// claimed); a consistently late or early stage shows in every one.
func checkDNSFollowsTheSlice(t *testing.T, sink *e2etest.Sink) {
	t.Helper()
	if s := DNSSettings(t, sink.Meta); s["ttl"] != ttl.String() || s["ttl_seen"] != "" {
		t.Errorf("header: dns settings %v, want ttl %s and no cache", s, ttl)
	}
	delays := CheckDelays(t, sink.Records, results.StageDNSLastPresent, results.StageDNSRemoved, DNSKey(cluster), -Slack, Interval+Slack)
	t.Logf("slice_not_ready→dns_removed: %v", delays)
}

// The command line: --observer dns with the DNS server by address times
// dns_removed, the report shows it beside the other stages and covers DNS
// clients in its recommendation; a DNS server that does not answer is bad
// input (exit 2) found before anything is created. Two trials: this checks
// the wiring, not the number.
func TestCLIObserverDNS(t *testing.T) {
	bin := e2etest.Bin(t)
	dir := t.TempDir()
	base := []string{"measure", "--kubeconfig", cluster.Kubeconfig, "--url", cluster.IngressURL, "--ingress-class", "skipper",
		"--quiet-period", "2s", "--rate", "100", "--observer", "dns", "--dns-interval", Interval.String(),
		"--trial-jitter", "0"} // the wiring, not the poll's phases

	// A UDP port nothing listens on: refused at once, or no answer.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	cmd := exec.Command(bin, append(base, "--dns-server", dead, "--out", filepath.Join(dir, "bad.jsonl"))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if code := e2etest.ExitCode(err); code != 2 || !strings.Contains(stderr.String(), "--dns-server "+dead) {
		t.Errorf("DNS server not answering: exit %d, want 2 naming --dns-server %s; stderr:\n%s", code, dead, stderr.String())
	}
	if left := e2etest.RunLeftovers(t, cluster.Client, ""); len(left) > 0 {
		t.Errorf("a run refused before it started left %v", left)
	}

	out := filepath.Join(dir, "r.jsonl")
	log, err := exec.Command(bin, append(base, "--dns-server", cluster.DNSDirect, "--trials", "2", "--out", out)...).CombinedOutput()
	if err != nil {
		t.Fatalf("measure --observer dns: %v; output:\n%s", err, log)
	}
	report, err := exec.Command(bin, "report", out).CombinedOutput()
	if err != nil {
		t.Fatalf("report: %v\n%s", err, report)
	}
	for _, l := range strings.Split(string(report), "\n") {
		if strings.Contains(l, "preStop") || strings.Contains(l, "dns_removed") {
			t.Log(l)
		}
	}
	for _, want := range []string{results.StageDNSRemoved, "slice_not_ready→dns_removed", "DNS clients that honour the TTL", "+ " + fmt.Sprintf("%.3fs", ttl.Seconds())} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

// publishNotReadyAddresses (what lint's EPW012 warns about) keeps a
// terminating pod's endpoint ready in its slice
// (staging/src/k8s.io/endpointslice/utils.go, podToEndpoint: ready =
// PublishNotReadyAddresses || (serving && !terminating)), so CoreDNS answers
// it until the pod object is gone: dns_removed follows slice_removed (the
// pod's deletion takes it out of every slice), within [−Slack, Interval +
// Slack], not slice_not_ready. The probe is held until DNS dropped it, so
// every trial runs into the hold and is censored: the window DNS clients
// see is at least the hold.
//
// Three trials with a 4 s hold: each shows it on its own (DNS keeps the
// address at least hold − 1 s = 3 s after slice_not_ready, against the
// Interval + Slack = 0.35 s it takes when the address is not published,
// checkDNSFollowsTheSlice).
func TestPublishNotReadyKeepsTheAddress(t *testing.T) {
	cfg := Config(t, cluster, 3)
	cfg.DNSPublishNotReady = true
	cfg.Hold = 4 * time.Second
	sink := e2etest.Run(t, cfg, 10*time.Minute)
	key := DNSKey(cluster)
	for _, r := range sink.Records {
		if !r.Censored() {
			t.Errorf("trial %d not cut at the hold: %s", r.Trial, r.InvalidReason())
		}
		rm, ok := r.StageKey(results.StageDNSRemoved, key)
		gone, ok2 := r.Stage(results.StageSliceRemoved)
		nr, ok3 := r.Stage(results.StageSliceNotReady)
		if !ok || !ok2 || !ok3 || !r.PointValid(results.StageDNSRemoved) {
			t.Errorf("trial %d: dns_removed %v, slice_removed %v, slice_not_ready %v; reasons %s", r.Trial, ok, ok2, ok3, r.InvalidReason())
			continue
		}
		if d := rm.At.Sub(gone.At); d < -Slack || d > Interval+Slack {
			t.Errorf("trial %d: slice_removed→dns_removed = %s, want within [%s, %s]", r.Trial, d, -Slack, Interval+Slack)
		}
		if d := rm.At.Sub(nr.At); d < cfg.Hold-time.Second {
			t.Errorf("trial %d: slice_not_ready→dns_removed = %s: DNS dropped the address before the hold (%s) ended", r.Trial, d, cfg.Hold)
		}
		t.Logf("trial %d: slice_not_ready→dns_removed %s, slice_removed→dns_removed %s", r.Trial, rm.At.Sub(nr.At), rm.At.Sub(gone.At))
	}
}
