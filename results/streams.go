package results

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/guptarohit/asciigraph"
)

// StreamTrial is one trial's long-lived connections (Record.Streams;
// measure --streams): how the deleted pod's open streams ended, seen by the
// clients (tool clock) and by the probe, and the reconnect herd that
// followed. Offsets are from the pod's SIGTERM (probe clock, corrected for
// skew onto the tool clock). Additive within schema version 2.
type StreamTrial struct {
	Protocol  string `json:"protocol"`
	Drain     string `json:"drain,omitempty"`
	Reconnect string `json:"reconnect,omitempty"`
	// OpenAtSigterm counts the clients' streams to the pod open at SIGTERM;
	// Closed of them ended while observed, Unclosed had not when the
	// trial's observation ended (their end is unknown, only later).
	OpenAtSigterm int `json:"open_at_sigterm"`
	Closed        int `json:"closed"`
	Unclosed      int `json:"unclosed,omitempty"`
	// Graceful and Abrupt split Closed: a close frame or a gRPC status
	// versus an EOF, reset or timeout.
	Graceful int `json:"graceful"`
	Abrupt   int `json:"abrupt"`
	// CloseKinds counts Closed by kind as the clients saw it, with the
	// code when there is one ("ws_close 1012", "grpc_status 0", "eof",
	// "reset"; a gRPC stream that broke carries the status grpc-go gave
	// it, "eof 14" for UNAVAILABLE).
	CloseKinds map[string]int `json:"close_kinds,omitempty"`
	// ProbeEnds counts the pod's own record of its streams' ends (probe
	// Timeline.Streams.Ended: app_close, process_exit, peer_close,
	// peer_gone); ProbeOpenAtSigterm is its count at SIGTERM.
	ProbeEnds          map[string]int64 `json:"probe_ends,omitempty"`
	ProbeOpenAtSigterm int64            `json:"probe_open_at_sigterm,omitempty"`
	// ProbeMatched counts the Closed streams whose end the probe's log
	// also has, matched one to one by the client's stream id; CloseLagNS
	// is, for each, the client's close minus the probe's end (the pod's
	// clock moved onto the tool's by the skew estimate), ascending: how
	// long the end took to reach the client through the path, give or
	// take the skew's uncertainty (the record's skew_uncertainty_ns).
	ProbeMatched int     `json:"probe_matched,omitempty"`
	CloseLagNS   []int64 `json:"close_lag_ns,omitempty"`
	// FirstCloseNS and LastCloseNS: SIGTERM → the first and the last of
	// those streams closed, at the client.
	FirstCloseNS *int64 `json:"first_close_ns,omitempty"`
	LastCloseNS  *int64 `json:"last_close_ns,omitempty"`
	// ObservedNS: SIGTERM → the end of the trial's observation. With
	// streams still open then (Unclosed), the last close is at least
	// that: the summary counts it there, censored.
	ObservedNS *int64 `json:"observed_ns,omitempty"`
	// OpenAtWithdrawal counts the streams still open when the data plane
	// had withdrawn the endpoint (the first upstream_removed, or
	// cluster_last_routed for the ClusterIP); OutliveNS is how long the
	// last of them outlived it.
	OpenAtWithdrawal *int   `json:"open_at_withdrawal,omitempty"`
	OutliveNS        *int64 `json:"outlive_ns,omitempty"`
	// Herd counts re-opens of the closed streams per HerdBinNS from the
	// first close; HerdPeak is the most re-opens in any HerdBinNS window
	// (sliding, so a burst across a bin edge counts whole).
	HerdBinNS int64 `json:"herd_bin_ns,omitempty"`
	Herd      []int `json:"herd,omitempty"`
	HerdPeak  int   `json:"herd_peak"`
	// HerdCleanPeak is the most re-opens in any HerdBinNS window in which
	// no re-open attempt failed: a load the survivors were seen to take
	// (they may take more). It equals HerdPeak when no re-open failed.
	HerdCleanPeak int `json:"herd_clean_peak,omitempty"`
	// Reopened counts the re-opens by the pod they landed on.
	Reopened map[string]int `json:"reopened,omitempty"`
	// Failures counts failed re-open attempts by kind (status_502,
	// refused, timeout, ...).
	Failures map[string]int `json:"failures,omitempty"`
	// ReestablishNS is close → re-established, per re-opened stream,
	// ascending.
	ReestablishNS []int64 `json:"reestablish_ns,omitempty"`
}

// Stream metrics summarised over trials.
const (
	MetricStreamFirstClose  = "stream_first_close"   // SIGTERM → first stream closed
	MetricStreamLastClose   = "stream_last_close"    // SIGTERM → last stream closed
	MetricStreamOutlive     = "stream_outlive"       // withdrawal → last stream closed
	MetricStreamReestablish = "stream_reestablish"   // per trial: the slowest close → re-open
	MetricStreamHerdPeak    = "stream_herd_peak"     // per trial: re-opens in the busiest bin
	MetricStreamHerdPeakPct = "stream_herd_peak_pct" // per trial: that as a % of OpenAtSigterm
)

// StreamSummary summarises the StreamTrials of a run: Add each record, then
// Close, then render.
type StreamSummary struct {
	q, conf float64
	trials  []*StreamTrial
	samples map[string]*sample
	// Dists are the metrics' distributions, in the order above; set by Close.
	Dists []Dist
	// CloseKinds, ProbeEnds, Failures and Reopened add up the trials'.
	CloseKinds map[string]int
	ProbeEnds  map[string]int64
	Failures   map[string]int
	Reopened   map[string]int
	// Herd is the trials' herds added bin by bin (aligned at each trial's
	// first close).
	Herd                       []int
	OpenAtSigterm, Graceful    int
	Abrupt, Unclosed, WithOpen int
	// MaxOpen is the most streams open to one pod at its SIGTERM;
	// CleanPeak the most re-opens in 100 ms taken without a failure in
	// any trial (StreamTrial.HerdCleanPeak).
	MaxOpen, CleanPeak int
	// Closed and Matched add up the trials' closes and those matched to
	// the probe's record of the stream; lags are the matched ones'
	// CloseLagNS.
	Closed, Matched            int
	lags                       []int64
	Protocol, Drain, Reconnect string
	// Path is "" for the streams through the ingress, "ClusterIP" for the
	// in-cluster runners'.
	Path   string
	pick   func(*Record) *StreamTrial
	closed bool
}

// NewStreamSummary summarises at quantile q and confidence conf, as the
// window's Summary does.
func NewStreamSummary(q, conf float64) *StreamSummary {
	return &StreamSummary{q: q, conf: conf, samples: map[string]*sample{},
		CloseKinds: map[string]int{}, ProbeEnds: map[string]int64{}, Failures: map[string]int{}, Reopened: map[string]int{},
		pick: func(r *Record) *StreamTrial { return r.Streams }}
}

// NewClusterStreamSummary is NewStreamSummary of the in-cluster runners'
// streams (Record.ClusterStreams).
func NewClusterStreamSummary(q, conf float64) *StreamSummary {
	s := NewStreamSummary(q, conf)
	s.Path, s.pick = "ClusterIP", func(r *Record) *StreamTrial { return r.ClusterStreams }
	return s
}

// Add takes one trial's record; records without streams are skipped.
func (s *StreamSummary) Add(r *Record) {
	if r == nil || s.pick(r) == nil || s.closed {
		return
	}
	t := s.pick(r)
	s.trials = append(s.trials, t)
	s.Protocol, s.Drain, s.Reconnect = t.Protocol, t.Drain, t.Reconnect
	s.OpenAtSigterm += t.OpenAtSigterm
	s.Graceful += t.Graceful
	s.Abrupt += t.Abrupt
	s.Unclosed += t.Unclosed
	s.MaxOpen = max(s.MaxOpen, t.OpenAtSigterm)
	s.Closed += t.Closed
	s.Matched += t.ProbeMatched
	s.lags = append(s.lags, t.CloseLagNS...)
	s.CleanPeak = max(s.CleanPeak, t.HerdCleanPeak)
	for k, v := range t.CloseKinds {
		s.CloseKinds[k] += v
	}
	for k, v := range t.ProbeEnds {
		s.ProbeEnds[k] += v
	}
	for k, v := range t.Failures {
		s.Failures[k] += v
	}
	for k, v := range t.Reopened {
		s.Reopened[k] += v
	}
	for i, n := range t.Herd {
		if i >= len(s.Herd) {
			s.Herd = append(s.Herd, make([]int, i-len(s.Herd)+1)...)
		}
		s.Herd[i] += n
	}
	add := func(metric string, v *int64, censored bool) {
		if v == nil {
			return
		}
		if s.samples[metric] == nil {
			s.samples[metric] = &sample{}
		}
		s.samples[metric].add(r.Trial, float64(*v), censored)
	}
	// A trial with streams still open at the end of its observation has a
	// last close (and outlive) of at least the end of the observation:
	// censored, as a window that ran into the hold is. When no stream
	// closed at all, its first close is such a floor too; the trial stays
	// in (it is the slowest one), as the window keeps its cut trials.
	censored := t.Unclosed > 0
	last, first := t.LastCloseNS, t.FirstCloseNS
	if censored && t.ObservedNS != nil && (last == nil || *t.ObservedNS > *last) {
		last = t.ObservedNS
	}
	add(MetricStreamFirstClose, cmp.Or(first, last), first == nil)
	add(MetricStreamLastClose, last, censored)
	add(MetricStreamOutlive, t.OutliveNS, censored)
	if n := len(t.ReestablishNS); n > 0 {
		add(MetricStreamReestablish, &t.ReestablishNS[n-1], false)
	}
	if t.OpenAtSigterm > 0 {
		peak := int64(t.HerdPeak)
		add(MetricStreamHerdPeak, &peak, false)
		s.WithOpen++
	}
}

// Close computes the distributions.
func (s *StreamSummary) Close() {
	s.closed = true
	for _, m := range []string{MetricStreamFirstClose, MetricStreamLastClose, MetricStreamOutlive, MetricStreamReestablish, MetricStreamHerdPeak} {
		if smp := s.samples[m]; smp != nil {
			s.Dists = append(s.Dists, newDist(m, smp, s.q, s.conf))
		}
	}
}

// Trials is how many trials had streams.
func (s *StreamSummary) Trials() int { return len(s.trials) }

// Dist is the named distribution, if any trial had it.
func (s *StreamSummary) Dist(metric string) (Dist, bool) {
	for _, d := range s.Dists {
		if d.Name == metric {
			return d, true
		}
	}
	return Dist{}, false
}

// StreamGrace is the grace period the streams need:
// terminationGracePeriodSeconds ≥ preStop + U(stream drain) + headroom,
// where U is the upper bound of SIGTERM → last stream closed. ok is false
// without a bound; lower is set when the bound is only a floor (a trial
// ended with streams still open).
func (s *StreamSummary) StreamGrace(preStop, headroom time.Duration) (grace time.Duration, lower, ok bool) {
	d, found := s.Dist(MetricStreamLastClose)
	if !found || d.Bound == nil {
		return 0, false, false
	}
	return preStop + time.Duration(d.Bound.NS) + headroom, d.Bound.LowerBound, true
}

// HerdBin is the herd's bin width.
const HerdBin = 100 * time.Millisecond

// NewStreamsReporter renders the "Long-lived connections" section: close
// kinds from both ends, the stages with their quantiles and bound, the herd
// as a terminal chart, and the recommendation. preStop and headroom are the
// run's (the window's recommendation).
func NewStreamsReporter(s *StreamSummary, preStop, headroom time.Duration) Reporter {
	return func(w io.Writer) error {
		e := &errWriter{w: w}
		via := ""
		if s.Path != "" {
			via = ", through the " + s.Path
		}
		e.printf("Long-lived connections (%s%s, --stream-drain %s, --reconnect %s)\n", s.Protocol, via, s.Drain, s.Reconnect)
		if s.Trials() == 0 {
			e.printf("  no trial recorded streams\n")
			return e.err
		}
		e.printf("  %d trials; %d streams open to the deleted pod at SIGTERM:\n", s.Trials(), s.OpenAtSigterm)
		e.printf("  %d ended gracefully, %d abruptly, %d still open when observation ended\n\n",
			s.Graceful, s.Abrupt, s.Unclosed)
		e.printf("  %-28s %8s   %-22s %8s\n", "client saw", "streams", "probe recorded", "streams")
		ck := slices.Sorted(maps.Keys(s.CloseKinds))
		pk := slices.Sorted(maps.Keys(s.ProbeEnds))
		for i := range max(len(ck), len(pk)) {
			var l, r string
			if i < len(ck) {
				l = fmt.Sprintf("  %-28s %8d", closeKindLabel(ck[i]), s.CloseKinds[ck[i]])
			} else {
				l = fmt.Sprintf("  %-28s %8s", "", "")
			}
			if i < len(pk) {
				r = fmt.Sprintf("   %-22s %8d", pk[i], s.ProbeEnds[pk[i]])
			}
			e.printf("%s%s\n", l, r)
		}
		if s.Matched > 0 {
			lags := slices.Sorted(slices.Values(s.lags))
			e.printf("  %d of %d closes matched to the probe's record of the stream; client − probe: median %s,\n"+
				"    from %s to %s (the pod's clock corrected for skew)\n",
				s.Matched, s.Closed, signedMS(lags[len(lags)/2]), signedMS(lags[0]), signedMS(lags[len(lags)-1]))
		}
		e.printf("\n  %-22s %4s %9s %9s %9s %9s  %s\n", "stage", "n", "p50", "p90", "max", "bound", "")
		for _, d := range s.Dists {
			unit := durText
			if d.Name == MetricStreamHerdPeak {
				unit = func(v int64) string { return fmt.Sprint(v) }
			}
			bound, claim := "—", ""
			if d.Bound != nil {
				bound = unit(d.Bound.NS)
				if d.Bound.LowerBound {
					bound = "≥" + bound
				}
				claim = d.Bound.Which()
			}
			maxS := unit(d.MaxNS)
			if d.Lower(1) {
				maxS = "≥" + maxS
			}
			e.printf("  %-22s %4d %9s %9s %9s %9s  %s\n", d.Name, d.N, unit(d.P50NS), unit(d.P90NS), maxS, bound, claim)
		}
		e.printf("  bound: with %s confidence, %s of trials stay at or under it (order statistics,\n"+
			"  distribution-free); ≥ marks a floor (a trial ended with streams still open)\n", pct(s.conf), pct(s.q))
		if len(s.Failures) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(s.Failures)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, s.Failures[k]))
			}
			e.printf("\n  failed re-opens: %s\n", strings.Join(parts, ", "))
		}
		if len(s.Reopened) > 0 {
			total := 0
			for _, v := range s.Reopened {
				total += v
			}
			pods := slices.SortedFunc(maps.Keys(s.Reopened), func(a, b string) int {
				return cmp.Or(cmp.Compare(s.Reopened[b], s.Reopened[a]), cmp.Compare(a, b))
			})
			var parts []string
			for _, p := range pods {
				parts = append(parts, fmt.Sprintf("%s %.0f%%", p, 100*float64(s.Reopened[p])/float64(total)))
			}
			// One pod per deleted pod's replacement and survivor: wrapped
			// to the terminal's TextWidth.
			parts[0] = "re-opens landed on: " + parts[0]
			lines := wrap(parts, ", ", TextWidth-7)
			for i, l := range lines {
				indent, more := "  ", ","
				if i > 0 {
					indent = "    "
				}
				if i == len(lines)-1 {
					more = ""
				}
				e.printf("%s%s%s\n", indent, l, more)
			}
		}
		if len(s.Herd) > 1 {
			series := make([]float64, len(s.Herd))
			for i, n := range s.Herd {
				series[i] = float64(n)
			}
			e.printf("\n  reconnect herd: re-opens per %s from the first close, all trials added (peak %d)\n",
				HerdBin, slices.Max(s.Herd))
			opts := []asciigraph.Option{asciigraph.Height(8), asciigraph.Offset(4)}
			if len(series) > PlotWidth {
				opts = append(opts, asciigraph.Width(PlotWidth))
			}
			e.printf("%s\n", asciigraph.Plot(series, opts...))
		}
		if g, lower, ok := s.StreamGrace(preStop, headroom); ok {
			d, _ := s.Dist(MetricStreamLastClose)
			ge := "≥"
			if lower {
				ge = "≥ at least"
			}
			e.printf("\n  terminationGracePeriodSeconds %s %d  (preStop %s + stream drain %s + headroom %s;\n    the drain bound is %s of SIGTERM → last stream closed)\n",
				ge, ceilSeconds(g), durText(int64(preStop)), durText(d.Bound.NS), durText(int64(headroom)), d.Bound.Which())
		}
		e.printf("%s", streamAdvice(s))
		return e.err
	}
}

// streamAdvice is the app-side advice the numbers support. The spread is
// sized from what the survivors were seen to take: the most re-opens in
// 100 ms with no failed re-open in that window (CleanPeak), a floor of their
// capacity; J is the shortest spread that keeps a herd of MaxOpen uniform
// closes under it with 95% probability (SpreadFor).
func streamAdvice(s *StreamSummary) string {
	var b strings.Builder
	if s.Abrupt > 0 {
		fmt.Fprintf(&b, "  %d streams ended abruptly (the process died with them open): close them after the\n"+
			"    preStop with a going-away signal (WebSocket 1001/1012, HTTP/2 GOAWAY + a status).\n", s.Abrupt)
	}
	d, ok := s.Dist(MetricStreamHerdPeak)
	if !ok || s.MaxOpen == 0 {
		return b.String()
	}
	failed := 0
	for _, n := range s.Failures {
		failed += n
	}
	switch {
	case failed == 0:
		if float64(d.MaxNS) >= 0.5*float64(s.MaxOpen) {
			fmt.Fprintf(&b, "  up to %d re-opens landed in one %s (of up to %d streams per pod) and the survivors took\n"+
				"    them without a failed re-open: at this size the herd needs no spread.\n", d.MaxNS, HerdBin, s.MaxOpen)
		}
	case s.CleanPeak == 0:
		fmt.Fprintf(&b, "  %d re-opens failed and no %s took a re-open without a failure: the survivors' capacity\n"+
			"    is unknown; spread the closes (--stream-drain close-jittered=DUR) and measure again.\n", failed, HerdBin)
	default:
		if j, ok := SpreadFor(s.MaxOpen, s.CleanPeak, HerdBin, SpreadConfidence); ok && j > 0 {
			fmt.Fprintf(&b, "  %d re-opens failed; the survivors took up to %d re-opens in one %s without a failure.\n"+
				"    Spread the closes over J ≥ %s (--stream-drain close-jittered=%s): %d closes uniform over J put\n"+
				"    at most %d in any %s with 95%% probability.\n",
				failed, s.CleanPeak, HerdBin, j, j, s.MaxOpen, s.CleanPeak, HerdBin)
		} else if !ok {
			fmt.Fprintf(&b, "  %d re-opens failed; the survivors took only %d re-opens in one %s without a failure:\n"+
				"    no spread up to 10 minutes keeps %d closes under that; add survivors or hold fewer streams per pod.\n",
				failed, s.CleanPeak, HerdBin, s.MaxOpen)
		}
	}
	return b.String()
}

// signedMS renders ns in milliseconds with a sign and 0.1 ms: +1.3ms.
func signedMS(ns int64) string { return fmt.Sprintf("%+.1fms", float64(ns)/1e6) }

// closeKindLabel renders "ws_close 1012" as "ws_close 1012 (graceful)".
func closeKindLabel(k string) string {
	how, _, _ := strings.Cut(k, " ")
	if how == "ws_close" || how == "grpc_status" {
		return k + " (graceful)"
	}
	return k + " (abrupt)"
}

// durText renders ns as a short duration: 1.234s, 87ms.
func durText(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// Streams summarises the closed Summary's stream records (measure
// --streams); its Trials is 0 when the run held none.
func (s *Summary) Streams() *StreamSummary {
	o := s.options()
	return s.streamSummary(NewStreamSummary(o.Quantile, o.Confidence))
}

// ClusterStreams is Streams of the in-cluster runners' streams.
func (s *Summary) ClusterStreams() *StreamSummary {
	o := s.options()
	return s.streamSummary(NewClusterStreamSummary(o.Quantile, o.Confidence))
}

func (s *Summary) streamSummary(ss *StreamSummary) *StreamSummary {
	for _, r := range s.records {
		ss.Add(r)
	}
	ss.Close()
	return ss
}

// streamsSection writes the Long-lived connections section when the run
// held streams, with the window's preStop and headroom in its formula.
func (s *Summary) streamsSection(w io.Writer) error {
	for _, ss := range []*StreamSummary{s.Streams(), s.ClusterStreams()} {
		if ss.Trials() == 0 {
			continue
		}
		if err := s.streamSection(w, ss); err != nil {
			return err
		}
	}
	return nil
}

func (s *Summary) streamSection(w io.Writer, ss *StreamSummary) error {
	var preStop, headroom time.Duration
	if r := s.doc.Recommendation; r != nil {
		preStop, headroom = r.PreStop(), time.Duration(r.HeadroomNS)
	} else {
		headroom = s.options().Headroom
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}
	return NewStreamsReporter(ss, preStop, headroom)(w)
}
