package dns

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// grpcSlack bounds what lies between the probe's gRPC port ending a
// connection and the tool's client seeing it, on the tool's clock: the
// probe's drain at exit is grpc-go's GracefulStop, which sends GOAWAY and
// then waits for the client to close the connection (grpc-go's client
// closes a transport with no open stream as soon as it reads GOAWAY,
// internal/transport/http2_client.go handleGoAway) before the probe stamps
// its exit; the client reads the GOAWAY one loopback hop away. Both are
// ms, but the scheduler of this 2-core machine and the probe clock's skew
// bound (added per trial) come in between: the 250 ms the other ground
// truths here allow for scheduling.
const grpcSlack = Slack

// A gRPC client with dns:/// and round_robin (grpc-go's resolver and
// balancer, --grpc-dns-rate) asks DNS only when a connection is lost, at
// most every 30 s: after CoreDNS dropped a deleted pod, the client still
// calls it, until the connection the calls go out on ends. Without
// MaxConnectionAge that is the pod's exit: the probe's GracefulStop sends
// GOAWAY, so grpc_last_routed comes after dns_removed and the connection
// ends at container_exit.
//
// With MaxConnectionAge the server ends each connection by GOAWAY at that
// age: the client re-connects (to the same address: its answer has not
// changed) and asks DNS again, which answers only once the 30 s floor since
// its last resolution has passed. Each trial then ends either by a GOAWAY
// (age or exit) or by the client's own close once a fresh answer left the
// address out, and that answer came after CoreDNS dropped it.
//
// The same client also runs in the cluster, in the run without
// MaxConnectionAge: an in-cluster runner resolves the headless Service with
// its pod's resolv.conf (the cluster DNS through the kube-dns Service) and
// calls the pods; its record is the tool's client's, keyed by the runner
// and put on the tool's clock with the runner's skew (checkRunnerGRPC).
// Both runs also carry the dns observer: checkDNSFollowsTheSlice.
//
// Three trials each (one per original pod of the three replicas, so the
// clients, which resolved all three at the start, call every victim): each
// trial checks the mechanism on its own; no statistic is claimed. About
// 15 s a trial.
func TestGRPCClientLeavesWithItsConnection(t *testing.T) {
	key := DNSKey(cluster)
	for _, tc := range []struct {
		name      string
		age       time.Duration
		inCluster bool
	}{{"no MaxConnectionAge, in the cluster too", 0, true}, {"MaxConnectionAge 1s", time.Second, false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config(t, cluster, 3)
			cfg.GRPCDNSRate, cfg.GRPCMaxConnectionAge = 50, tc.age
			if tc.inCluster {
				cfg.InClusterLoad, cfg.InClusterRate = 1, 20
			}
			sink := e2etest.Run(t, cfg, 10*time.Minute)
			checkDNSFollowsTheSlice(t, sink)
			if tc.inCluster {
				checkRunnerGRPC(t, sink)
			}
			if g := sink.Meta.GRPCDNS; g == nil || g.MaxConnectionAgeNS != int64(tc.age) || g.MinResolutionIntervalNS != int64(30*time.Second) {
				t.Fatalf("header grpc_dns %+v", g)
			}
			called := 0
			for _, r := range sink.Records {
				g := r.GRPC
				last, ok := r.Stage(results.StageGRPCLastRouted)
				if g == nil || !ok {
					t.Logf("trial %d: the client did not call %s: %+v", r.Trial, r.Pod, g)
					continue
				}
				called++
				removed, okR := r.StageKey(results.StageDNSRemoved, key)
				exit, okE := r.Stage(results.StageContainerExit)
				if !okR || !okE || !r.PointValid(results.StageContainerExit) {
					t.Errorf("trial %d: dns_removed %v, container_exit %v: %s", r.Trial, okR, okE, r.InvalidReason())
					continue
				}
				t.Logf("trial %d: dns_removed→grpc_last_routed %s, end %s: %s", r.Trial, last.At.Sub(removed.At), g.End, g.Mechanism)
				exitSlack := grpcSlack + time.Duration(exit.UncertaintyNS)
				switch {
				case g.End == results.GRPCEndGoaway && tc.age == 0:
					// The only GOAWAY is the exit's.
					if d := g.ConnEnded.Sub(exit.At); d < -exitSlack || d > exitSlack {
						t.Errorf("trial %d: the connection ended %s from container_exit, want within ±%s", r.Trial, d, exitSlack)
					}
					if !strings.Contains(g.Mechanism, "drained before its exit") {
						t.Errorf("trial %d: mechanism %q, want the drain's GOAWAY", r.Trial, g.Mechanism)
					}
					if !last.At.After(removed.At) {
						t.Errorf("trial %d: the last call %s before dns_removed: the client left before DNS dropped the pod without a connection's end", r.Trial, removed.At.Sub(last.At))
					}
				case g.End == results.GRPCEndGoaway:
					if g.GoAway.IsZero() || g.ConnEnded.Sub(exit.At) > exitSlack {
						t.Errorf("trial %d: GOAWAY at %v, connection ended %s after container_exit", r.Trial, g.GoAway, g.ConnEnded.Sub(exit.At))
					}
				case g.End == results.GRPCEndDNS && tc.age > 0:
					// The client's answer without the address came after
					// CoreDNS's (dns_removed is its first answer without
					// it, one Interval late at most), and no call went out
					// after the client closed the connection.
					if g.ResolvedOut.Before(removed.At.Add(-Interval)) {
						t.Errorf("trial %d: the client's answer without the pod %s before CoreDNS's", r.Trial, removed.At.Sub(g.ResolvedOut))
					}
					if sent := last.At.Add(-time.Duration(last.UncertaintyNS)); sent.After(g.ConnEnded) {
						t.Errorf("trial %d: a call sent after the client closed the connection", r.Trial)
					}
				default:
					t.Errorf("trial %d: the connection ended by %q (%s)", r.Trial, g.End, g.Mechanism)
				}
			}
			if called < 2 {
				t.Errorf("the client called the deleted pod in %d of %d trials, want at least 2", called, len(sink.Records))
			}
		})
	}
}

// checkRunnerGRPC: the in-cluster runner's client, without
// MaxConnectionAge, also ends its calls with the drain's GOAWAY, after
// CoreDNS dropped the pod.
func checkRunnerGRPC(t *testing.T, sink *e2etest.Sink) {
	t.Helper()
	if g := sink.Meta.GRPCDNS; g == nil || !strings.HasPrefix(g.RunnerTarget, "dns:///") {
		t.Fatalf("header grpc_dns %+v, want the runners' target", g)
	}
	key := DNSKey(cluster)
	called := 0
	for _, r := range sink.Records {
		removed, okR := r.StageKey(results.StageDNSRemoved, key)
		for _, rn := range r.Runners {
			last, ok := r.StageKey(results.StageGRPCLastRouted, rn.Key())
			if rn.GRPC == nil || !ok {
				t.Logf("trial %d: runner %s: %+v, note %q", r.Trial, rn.Key(), rn.GRPC, rn.Note)
				continue
			}
			called++
			t.Logf("trial %d: runner %s: dns_removed→grpc_last_routed %s, end %s: %s", r.Trial, rn.Key(), last.At.Sub(removed.At), rn.GRPC.End, rn.GRPC.Mechanism)
			if last.Clock != results.ClockRunner || rn.GRPC.End != results.GRPCEndGoaway || !strings.Contains(rn.GRPC.Mechanism, "drained before its exit") {
				t.Errorf("trial %d: runner %s: stage %+v, record %+v; want the drain's GOAWAY", r.Trial, rn.Key(), last, rn.GRPC)
			}
			if !okR || !last.At.After(removed.At) {
				t.Errorf("trial %d: runner %s: last call %s, dns_removed %v: want calls after CoreDNS dropped the pod", r.Trial, rn.Key(), last.At, removed.At)
			}
		}
	}
	// As for the tool's client: the wiring shows in two of three.
	if called < 2 {
		t.Errorf("the runner's gRPC client called the deleted pod in %d of %d trials, want at least 2", called, len(sink.Records))
	}
}

// A rollout that replaces every replica well within grpc-go's 30 s
// resolution floor: the client (the tool's, resolving through CoreDNS)
// learned the three old pods at its start; each lost connection asks DNS
// again, but MinResolutionInterval (internal/resolver/dns/dns_resolver.go)
// holds the answer back until 30 s after the last one, so once the old
// pods have all exited the client has no address left and fails its calls
// until then. The run's report must show them: counted per trial in
// grpc.failures, summed in the summary, on a line of its own (never
// "none"), with the cause among the caveats. Three replicas, one rollout:
// its pods replaced in a few seconds here (the probe is ready at once),
// each exiting a quiet period after its address left every path; about
// 40 s.
func TestGRPCClientFailuresInARolloutAreReported(t *testing.T) {
	cfg := Config(t, cluster, 3)
	cfg.Mode = measure.ModeRollout
	cfg.GRPCDNSRate = 50
	sink := e2etest.Run(t, cfg, 10*time.Minute)
	var first, last time.Time
	failed := map[string]int{}
	for _, r := range sink.Records {
		if first.IsZero() || r.T0.Before(first) {
			first = r.T0
		}
		if exit, ok := r.Stage(results.StageContainerExit); ok && exit.At.After(last) {
			last = exit.At
		}
		if r.GRPC != nil {
			failed = results.AddCounts(failed, r.GRPC.Failures)
			t.Logf("trial %d (%s): end %q, %d resolutions, failures %v", r.Trial, r.Pod, r.GRPC.End, r.GRPC.Resolutions, r.GRPC.Failures)
		}
	}
	t.Logf("the rollout's %d deletions: first at %s, last old pod exited %s later; the client's failures %v",
		len(sink.Records), first.Format(time.RFC3339Nano), last.Sub(first), failed)
	if last.Sub(first) >= 30*time.Second {
		t.Fatalf("the rollout took %s, not within grpc-go's 30 s floor: the test shows nothing", last.Sub(first))
	}
	total := 0
	for _, n := range failed {
		total += n
	}
	if total == 0 {
		t.Fatalf("every old pod gone within %s of the rollout's start, yet the gRPC DNS client failed no call", last.Sub(first))
	}
	f := &results.File{Header: sink.Meta}
	for _, r := range sink.Records {
		f.Trials = append(f.Trials, *r)
	}
	sum := results.Summarize(f, results.Options{})
	if got := sum.Doc().GRPCFailures; !maps.Equal(got, failed) {
		t.Errorf("summary grpc_failures %v, want the trials' %v", got, failed)
	}
	var b strings.Builder
	if err := results.NewTextReporter(sum)(&b); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(b.String()), " ")
	if !strings.Contains(text, "gRPC DNS client failures (this machine's): all trials ") || strings.Contains(text, "gRPC DNS client failures (this machine's): all trials none") || !strings.Contains(text, "MinResolutionInterval") {
		t.Errorf("the report does not show the client's failures and their cause:\n%s", b.String())
	}
}
