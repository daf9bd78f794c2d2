package measure

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// grpcMinResolutionInterval is grpc-go's floor between two resolutions of
// its dns resolver (internal/resolver/dns/dns_resolver.go,
// MinResolutionInterval, 30 s): the run keeps it, as a client does.
const grpcMinResolutionInterval = 30 * time.Second

// grpcTarget is the gRPC client's target: the headless Service's name on
// the first --dns-server, at the probe's gRPC port.
func (r *runner) grpcTarget() (string, error) {
	cfg := r.cfg
	server, err := upstream.DNSServerAddr(cfg.DNSOptions.Servers[0])
	if err != nil {
		return "", &FlagError{Flag: upstream.FlagDNSServer, Value: cfg.DNSOptions.Servers[0], Err: err}
	}
	name := upstream.DNSName(r.wl.Headless.Name, r.ns, cfg.ClusterDomain)
	return "dns://" + server + "/" + net.JoinHostPort(name, strconv.Itoa(int(r.params.GRPCPort()))), nil
}

// runnerGRPCTarget is the in-cluster runners' gRPC target: the headless
// Service's name, resolved by their pods' resolv.conf, at the probe's gRPC
// port.
func (r *runner) runnerGRPCTarget() string {
	name := upstream.DNSName(r.wl.Headless.Name, r.ns, r.cfg.ClusterDomain)
	return "dns:///" + net.JoinHostPort(name, strconv.Itoa(int(r.params.GRPCPort())))
}

// startGRPC starts the gRPC DNS client (--grpc-dns-rate) once the run is
// steady, so its one resolution at the start holds every probe pod, and
// waits until each is answering its calls.
func (r *runner) startGRPC(ctx context.Context, goFn func(func() error)) error {
	cfg := r.cfg
	target, err := r.grpcTarget()
	if err != nil {
		return err
	}
	gen, err := load.New(load.Config{URL: target, Rate: cfg.GRPCDNSRate, Timeout: cfg.LoadTimeout}, cfg.Clock)
	if err != nil {
		return &FlagError{Flag: FlagGRPCDNSRate, Err: err}
	}
	r.grpcGen = gen
	goFn(func() error { return gen.Run(ctx) })
	return r.pollSteady(ctx, func() (string, error) {
		pods, err := r.steadyPods()
		if err != nil {
			return "", err
		}
		for _, p := range pods {
			if _, ok := gen.Pod(p.Name); !ok {
				return fmt.Sprintf("pod %s not yet answering the gRPC client (%s)", p.Name, target), nil
			}
		}
		return "", nil
	}, func(why string) error {
		return fmt.Errorf("no steady state after %s (--%s): %s; are the probe pods' port %d reachable from here, and does the DNS server answer the name?",
			cfg.SettleTimeout, FlagSettle, why, r.params.GRPCPort())
	})
}

// grpcHeader is the results header's record of the client.
func (r *runner) grpcHeader() *results.GRPCDNS {
	if r.cfg.GRPCDNSRate <= 0 {
		return nil
	}
	h := &results.GRPCDNS{Rate: r.cfg.GRPCDNSRate,
		MaxConnectionAgeNS: int64(r.cfg.GRPCMaxConnectionAge), MinResolutionIntervalNS: int64(grpcMinResolutionInterval)}
	if r.grpcGen != nil {
		h.Target, _ = r.grpcTarget()
	}
	if r.cfg.InClusterLoad > 0 {
		h.RunnerTarget = r.runnerGRPCTarget()
	}
	return h
}

// grpcInput is what the trial read of the gRPC client: its last call to the
// pod and its log.
type grpcInput struct {
	last     load.PodStats
	called   bool
	log      load.GRPCLog
	failures map[string]int
}

// readGRPC reads the client at the trial's end, once the calls due before
// end have an outcome.
func (r *runner) readGRPC(ctx context.Context, pod string, t0, end time.Time) (*grpcInput, error) {
	if r.grpcGen == nil {
		return nil, nil
	}
	if err := r.grpcGen.Settle(ctx, end); err != nil {
		return nil, err
	}
	in := &grpcInput{failures: r.grpcGen.Failures(t0, end)}
	in.last, in.called = r.grpcGen.Pod(pod)
	in.log, _ = r.grpcGen.GRPCLog()
	return in, nil
}

// grpcTrial is the record's account of how the client left the pod, and
// its last call as grpc_last_routed.
//
// drainFrom is when the probe began its drain before exit (released or the
// hold's end), on the tool's clock less its skew bound (zero: unknown): a
// GOAWAY from then on is the drain's (grpc-go's GracefulStop), one before it
// MaxConnectionAge's.
func grpcTrial(in *grpcInput, t0, drainFrom time.Time, add func(name, key string, at time.Time, unc time.Duration, c results.Clock)) *results.GRPCTrial {
	return grpcTrialOn(in, grpcClock{clock: results.ClockTool}, t0, drainFrom, add)
}

// grpcClock is the clock a gRPC client's instants are on: the tool's, or
// an in-cluster runner's, put on the tool's with its skew estimate (key is
// then the runner's, unc the estimate's bound).
type grpcClock struct {
	key    string
	toTool func(time.Time) time.Time // nil: the tool's clock
	unc    time.Duration
	clock  results.Clock
}

// onTool puts in's instants on the tool's clock.
func (c grpcClock) onTool(in *grpcInput) *grpcInput {
	if c.toTool == nil {
		return in
	}
	f := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return c.toTool(t)
	}
	out := *in
	out.last.FirstSent, out.last.First, out.last.LastSent, out.last.Last = f(in.last.FirstSent), f(in.last.First), f(in.last.LastSent), f(in.last.Last)
	l := in.log
	l.Resolutions = slices.Clone(l.Resolutions)
	for i := range l.Resolutions {
		l.Resolutions[i].At = f(l.Resolutions[i].At)
	}
	l.ResolveNow = slices.Clone(l.ResolveNow)
	for i := range l.ResolveNow {
		l.ResolveNow[i] = f(l.ResolveNow[i])
	}
	l.Conns = slices.Clone(l.Conns)
	for i := range l.Conns {
		c := &l.Conns[i]
		c.Dialed, c.Ended, c.GoAway = f(c.Dialed), f(c.Ended), f(c.GoAway)
	}
	out.log = l
	return &out
}

// grpcTrialOn is grpcTrial for a client on clock c.
func grpcTrialOn(in *grpcInput, c grpcClock, t0, drainFrom time.Time, add func(name, key string, at time.Time, unc time.Duration, c results.Clock)) *results.GRPCTrial {
	if in == nil {
		return nil
	}
	in = c.onTool(in)
	gt := &results.GRPCTrial{Failures: in.failures}
	for _, res := range in.log.Resolutions {
		if !res.At.Before(t0) {
			gt.Resolutions++
		}
	}
	if !in.called || in.last.Last.Before(t0) {
		gt.End = ""
		gt.Mechanism = "the client made no call to the pod during the trial: its last DNS answer before T0 did not hold the address"
		if in.called {
			gt.Mechanism = "the client's last call to the pod was before T0"
		}
		return gt
	}
	// The call went out between LastSent and Last; the pod answered in
	// between.
	add(results.StageGRPCLastRouted, c.key, in.last.Last, c.unc+in.last.Last.Sub(in.last.LastSent), c.clock)
	gt.Mechanism = in.log.Mechanism(in.last.Addr, in.last.LastSent)
	if res, ok := in.log.FirstWithout(in.last.Addr, t0); ok {
		gt.ResolvedOut = res.At
	}
	conn, ok := in.log.ConnAt(in.last.Addr, in.last.LastSent)
	if !ok {
		return gt
	}
	gt.ConnEnded, gt.GoAway = conn.Ended, conn.GoAway
	switch conn.End {
	case load.ConnEndGoaway:
		gt.End = results.GRPCEndGoaway
		switch {
		case drainFrom.IsZero():
		case !conn.GoAway.Before(drainFrom):
			gt.Mechanism = "the server's GOAWAY (" + conn.GoAwayCode + ") as the probe drained before its exit (grpc-go's GracefulStop)"
		default:
			gt.Mechanism = "the server's GOAWAY (" + conn.GoAwayCode + ") before the probe's drain: MaxConnectionAge"
		}
	case load.ConnEndReset:
		gt.End = results.GRPCEndReset
	case load.ConnEndEOF:
		gt.End = results.GRPCEndEOF
	case load.ConnEndClient:
		gt.End = results.GRPCEndDNS
	case "":
		gt.End = results.GRPCEndOpen
	default:
		gt.End = conn.End
	}
	return gt
}
