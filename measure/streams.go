package measure

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/results"
)

// Stream flag names (measure --streams).
const (
	FlagStreams        = "streams"
	FlagStreamProtocol = "stream-protocol"
	FlagStreamDrain    = "stream-drain"
	FlagReconnect      = "reconnect"
)

// StreamOptions are the long-lived connections a run holds (Config.Streams).
type StreamOptions struct {
	// N streams are held open through --url (--streams); 0: none.
	N int
	// Protocol is load.ProtocolWebSocket or load.ProtocolGRPC.
	Protocol string
	// Drain is the probe's --stream-drain.
	Drain probe.StreamDrain
	// Reconnect is the clients' policy.
	Reconnect load.Reconnect
}

// fdsPerStream is what one held stream costs this process: one socket
// (WebSocket) or one socket plus grpc-go's ClientConn, which holds no other
// descriptor.
const fdsPerStream = 1

// fdHeadroom is what the rest of the run needs besides the streams: the
// load generator's connections (its in-flight cap), API watches, files.
const fdHeadroom = 1024

// validateStreams checks the stream options against each other and against
// the open-file limit; nofile is RLIMIT_NOFILE's soft limit (Go's runtime
// already raised it to the hard limit at start: os/rlimit.go).
func validateStreams(o StreamOptions, loadConns int, nofile uint64) error {
	var errs []error
	switch {
	case o.N < 0:
		errs = append(errs, fmt.Errorf("--%s (%d) must not be negative", FlagStreams, o.N))
	case o.N > 0 && o.Protocol == "":
		errs = append(errs, fmt.Errorf("--%s %d needs --%s websocket or grpc", FlagStreams, o.N, FlagStreamProtocol))
	case o.N == 0 && o.Protocol != "":
		errs = append(errs, fmt.Errorf("--%s %s needs --%s N (how many streams to hold)", FlagStreamProtocol, o.Protocol, FlagStreams))
	}
	if o.Protocol != "" && o.Protocol != load.ProtocolWebSocket && o.Protocol != load.ProtocolGRPC {
		errs = append(errs, fmt.Errorf("--%s %q: want websocket or grpc", FlagStreamProtocol, o.Protocol))
	}
	if o.N > 0 {
		need := uint64(o.N)*fdsPerStream + uint64(max(loadConns, 0)) + fdHeadroom
		if need > nofile {
			errs = append(errs, fmt.Errorf("--%s %d needs about %d open files, but this process may open %d (RLIMIT_NOFILE): "+
				"lower --%s or raise the limit (ulimit -n, or the hard limit in limits.conf / the unit's LimitNOFILE)",
				FlagStreams, o.N, need, nofile, FlagStreams))
		}
	}
	return errors.Join(errs...)
}

// openFileLimit is RLIMIT_NOFILE's soft limit.
func openFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	return l.Cur, nil
}

// startStreams opens the run's streams through --url, once the load is
// steady, and waits until they are open. A gRPC stream through an ingress
// that speaks HTTP/1.1 to the pods never opens: that is bad input (the
// Service lacks the h2c annotation), found here before any trial.
func (r *runner) startStreams(ctx context.Context, run func(func() error)) error {
	o := r.cfg.Streams
	h, err := load.NewStreamHolder(load.StreamConfig{URL: r.cfg.URL.String(), Host: r.cfg.Host, Protocol: o.Protocol,
		Streams: o.N, Reconnect: o.Reconnect}, r.cfg.Clock)
	if err != nil {
		return &FlagError{Flag: FlagStreams, Err: err}
	}
	r.streams = h
	run(func() error { return h.Run(ctx) })
	deadline := r.cfg.Clock.NewTimer(r.cfg.SettleTimeout)
	defer deadline.Stop()
	tick := r.cfg.Clock.NewTicker(steadyPoll)
	defer tick.Stop()
	for h.Open() < int64(o.N) {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline.C():
			return r.streamsNotOpen(h)
		case <-tick.C():
		}
	}
	return nil
}

// herdSettle is how long past the reconnect policy's first wait a trial
// waits for its streams to re-open: a few failed attempts (grpc-default
// waits 1 s after the first failure, then 1.6 s).
const herdSettle = 3 * time.Second

// awaitReopens waits, from the trial's end, until the tool's streams are
// all open again, or for at most the policy's longest first wait plus
// herdSettle, and returns when it stopped: the end of the trial's stream
// observation. Streams that end with the pod's exit (--stream-drain none
// or goaway) re-open after the trial's other stages are complete, and
// their herd would otherwise fall outside the record.
func (r *runner) awaitReopens(ctx context.Context, end time.Time) time.Time {
	o := r.cfg.Streams
	if r.streams == nil || o.N == 0 || r.streams.Open() >= int64(o.N) {
		return end
	}
	limit := r.cfg.Clock.NewTimer(o.Reconnect.Wait(0, 1) + herdSettle)
	defer limit.Stop()
	tick := r.cfg.Clock.NewTicker(steadyPoll)
	defer tick.Stop()
	for r.streams.Open() < int64(o.N) {
		select {
		case <-ctx.Done():
			return r.cfg.Clock.Now()
		case <-limit.C():
			return r.cfg.Clock.Now()
		case <-tick.C():
		}
	}
	return r.cfg.Clock.Now()
}

// streamsNotOpen explains why the streams did not all open in time.
func (r *runner) streamsNotOpen(h *load.StreamHolder) error {
	ev, _ := h.Events()
	fails := map[string]int{}
	last := ""
	for _, e := range ev {
		if e.Kind == load.EventFail {
			fails[e.How]++
			last = e.Detail
		}
	}
	o := r.cfg.Streams
	if h.Open() == 0 && o.Protocol == load.ProtocolGRPC {
		return &FlagError{Flag: FlagStreamProtocol, Value: o.Protocol, Err: fmt.Errorf(
			"no gRPC stream opened through --%s in %s (failures %v; last: %s): the ingress must speak h2c to the pods; "+
				"for Traefik annotate the Service %s: h2c (measure sets it with --%s traefik)",
			FlagURL, r.cfg.SettleTimeout, fails, last, deploy.AnnotationTraefikScheme, FlagIngressClass)}
	}
	return fmt.Errorf("%d of %d streams open through --%s after %s (failures %v; last: %s)",
		h.Open(), o.N, FlagURL, r.cfg.SettleTimeout, fails, last)
}

// streamRecord builds rec's stream record: the holder's events up to end,
// the pod's SIGTERM (pod clock corrected) and the data plane's withdrawal.
func (r *runner) streamRecord(rec *results.Record, probeLog *probe.StreamLog, end time.Time) *results.StreamTrial {
	if r.streams == nil {
		return nil
	}
	sig, ok := rec.Stage(results.StageSigterm)
	if !ok {
		return nil
	}
	ev, _ := r.streams.Events()
	in := streamInput{events: ev, pod: rec.Pod, sigterm: sig.At, withdrawn: withdrawal(rec), until: end,
		protocol: r.cfg.Streams.Protocol, drain: r.cfg.Streams.Drain.String(), reconnect: r.cfg.Streams.Reconnect.String()}
	in.probeLog, in.probeSkew = probeLog, time.Duration(rec.SkewNS)
	return streamTrial(in)
}

// clusterStreamRecord is rec's stream record of the in-cluster runners'
// streams (through the ClusterIP): their events moved onto the tool clock
// by each runner's skew estimate, slots numbered apart per runner. Nil
// without runner streams, or when no runner's clock could be read.
func (r *runner) clusterStreamRecord(rec *results.Record, probeLog *probe.StreamLog, runners []*runnerState, end time.Time) *results.StreamTrial {
	o := r.cfg.Streams
	sig, ok := rec.Stage(results.StageSigterm)
	if o.N == 0 || !ok {
		return nil
	}
	var ev []load.StreamEvent
	for i, st := range runners {
		if !st.statsOK || !st.skewOK {
			continue
		}
		for _, e := range st.stats.Streams {
			e.Slot += i * o.N
			// The skew is runner − tool.
			e.At = e.At.Add(-st.skew.Offset)
			ev = append(ev, e)
		}
	}
	if len(ev) == 0 {
		return nil
	}
	in := streamInput{events: ev, pod: rec.Pod, sigterm: sig.At, withdrawn: withdrawal(rec), until: end,
		protocol: o.Protocol, drain: o.Drain.String(), reconnect: o.Reconnect.String()}
	in.probeLog, in.probeSkew = probeLog, time.Duration(rec.SkewNS)
	return streamTrial(in)
}

// leaveOutFullLogs drops rec's stream records whose holder's event log was
// full before until, with a reason each (streamsLogFull): an incomplete
// log misses closes, and a stream whose close is missing would count as
// still open, its end censored at until.
func (r *runner) leaveOutFullLogs(rec *results.Record, runners []*runnerState, until time.Time) {
	var n int64
	var first time.Time
	if r.streams != nil {
		n, first = r.streams.Dropped()
	}
	own, cluster, reasons := streamsLogFull(n, first, runners, until)
	if own {
		rec.Streams = nil
	}
	if cluster {
		rec.ClusterStreams = nil
	}
	if len(reasons) > 0 {
		rec.Reasons = append(rec.Reasons, reasons...)
		rec.Valid = false
	}
}

// streamsLogFull says whether a trial whose stream observation ended at
// until lacks events because a holder's event log was full: the tool's own
// (ownDropped events, the first at ownFirst, tool clock) or a runner's
// (its stats, runner clock, moved onto the tool's by its skew estimate).
// A log is full from its first dropped event on, so a trial is hit when
// that came before until; the events before it are complete. The reasons
// name each such log.
func streamsLogFull(ownDropped int64, ownFirst time.Time, runners []*runnerState, until time.Time) (own, cluster bool, reasons []results.Reason) {
	if ownDropped > 0 && ownFirst.Before(until) {
		own = true
		reasons = append(reasons, results.Reason{Code: results.ReasonStreamsLogFull, Detail: fmt.Sprintf(
			"the tool's stream event log was full from %s (%d events dropped): the trial's stream record is left out",
			ownFirst.Format(time.RFC3339Nano), ownDropped)})
	}
	for _, st := range runners {
		s := st.stats
		if !st.statsOK || !st.skewOK || s.StreamsDropped == 0 {
			continue
		}
		first := st.skew.ToTool(s.StreamsFirstDropped)
		if !first.Before(until) {
			continue
		}
		cluster = true
		reasons = append(reasons, results.Reason{Code: results.ReasonStreamsLogFull, Detail: fmt.Sprintf(
			"runner %s's stream event log was full from %s (%d events dropped): the trial's ClusterIP stream record is left out",
			st.pod, first.Format(time.RFC3339Nano), s.StreamsDropped)})
	}
	return own, cluster, reasons
}

// streamDrainSpread is how long after SIGTERM the probe's stream drain
// may still close streams: the spread of close-jittered plus 500 ms for
// the last close to reach the clients (its timer and one frame through a
// hop), zero otherwise. The probe is not released before it: a release
// ends the drain early (the probe's exit closes what is left with 1001),
// and the drain is what is measured.
func streamDrainSpread(o StreamOptions) time.Duration {
	if o.N == 0 || o.Drain.Mode != probe.DrainCloseJittered {
		return 0
	}
	return o.Drain.Spread + 500*time.Millisecond
}

// streamLog is the probe's stream log for a trial's record: the final
// timeline's (the termination message's when there is one: its counts and
// the compact ends of the streams that ended at the exit), with the
// per-stream records of the last /timeline read while the probe ran (the
// termination message has no room for them). Nil if neither has one.
func streamLog(final, lastRead *probe.Timeline) *probe.StreamLog {
	var l probe.StreamLog
	switch {
	case final != nil && final.Streams != nil:
		l = *final.Streams
	case lastRead != nil && lastRead.Streams != nil:
		l = *lastRead.Streams
	default:
		return nil
	}
	if lastRead != nil && lastRead.Streams != nil && len(l.Records) == 0 {
		l.Records = lastRead.Streams.Records
	}
	return &l
}

// withdrawal is when the data plane had withdrawn the pod's endpoint: the
// last observer's upstream_removed, or the ClusterIP path's
// cluster_last_routed when it is later; zero when neither was seen.
func withdrawal(rec *results.Record) time.Time {
	var at time.Time
	for _, name := range []string{results.StageUpstreamRemoved, results.StageClusterLastRouted} {
		if s, ok := rec.StageMax(name); ok && s.At.After(at) {
			at = s.At
		}
	}
	return at
}
