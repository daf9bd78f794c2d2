package measure

import (
	"context"
	"fmt"
	"net"
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
	if r.grpcGen == nil {
		return nil
	}
	target, _ := r.grpcTarget()
	return &results.GRPCDNS{Target: target, Rate: r.cfg.GRPCDNSRate,
		MaxConnectionAgeNS: int64(r.cfg.GRPCMaxConnectionAge), MinResolutionIntervalNS: int64(grpcMinResolutionInterval)}
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
	if in == nil {
		return nil
	}
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
	add(results.StageGRPCLastRouted, "", in.last.Last, in.last.Last.Sub(in.last.LastSent), results.ClockTool)
	gt.Mechanism = in.log.Mechanism(in.last.Addr, in.last.LastSent)
	if res, ok := in.log.FirstWithout(in.last.Addr, t0); ok {
		gt.ResolvedOut = res.At
	}
	c, ok := in.log.ConnAt(in.last.Addr, in.last.LastSent)
	if !ok {
		return gt
	}
	gt.ConnEnded, gt.GoAway = c.Ended, c.GoAway
	switch c.End {
	case load.ConnEndGoaway:
		gt.End = results.GRPCEndGoaway
		switch {
		case drainFrom.IsZero():
		case !c.GoAway.Before(drainFrom):
			gt.Mechanism = "the server's GOAWAY (" + c.GoAwayCode + ") as the probe drained before its exit (grpc-go's GracefulStop)"
		default:
			gt.Mechanism = "the server's GOAWAY (" + c.GoAwayCode + ") before the probe's drain: MaxConnectionAge"
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
		gt.End = c.End
	}
	return gt
}
