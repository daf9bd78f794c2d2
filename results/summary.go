package results

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// Points are the instants the reports tabulate, as offsets from T0, in the
// order causality suggests (the node path and the control-plane path
// interleave). Keyed stages contribute their latest instance. Read-only.
var Points = []string{
	StageDeleteAcked,
	StagePodTerminatingSeen,
	StageServerDeleteTime,
	StageSliceNotReady,
	StageSliceNotServing,
	StageUpstreamLastSeen,
	StageUpstreamRemoved,
	StagePrestopCalled,
	StageSigterm,
	StageLastAccept,
	StageLastRequest,
	StageClientLastRouted,
	PointWindow,
	StageSliceRemoved,
	StageContainerExit,
	StagePodDeleted,
}

// Delta is the duration between two points of the same trial.
type Delta struct{ From, To string }

// Name is "from→to", the delta's name in reports and thresholds.
func (d Delta) Name() string { return d.From + "→" + d.To }

// Deltas are the stage-to-stage durations the reports tabulate: the
// control-plane path (slice → ingress → last traffic) and the node path
// (kubelet → preStop → SIGTERM), and what each termination signal must cover.
// Read-only.
var Deltas = []Delta{
	{StageSliceNotReady, StageUpstreamRemoved},
	{StageUpstreamRemoved, PointWindow},
	{StageSliceNotReady, PointWindow},
	{StagePodTerminatingSeen, StagePrestopCalled},
	{StagePrestopCalled, StageSigterm},
	{StagePrestopCalled, PointWindow},
	{StageSigterm, PointWindow},
}

// Options shape a Summary's recommendation. Zero fields take the header's
// values, then the defaults below.
type Options struct {
	// Quantile of (traffic end − prestop_called) the preStop must cover;
	// default 0.99.
	Quantile float64
	// Margin added to that quantile; the worst observer resolution in the
	// header raises it. Default DefaultMargin.
	Margin time.Duration
	// Drain is the longest request the app finishes after SIGTERM
	// (--drain); default the header's DrainNS.
	Drain time.Duration
	// Headroom is added to preStop + Drain for the grace period; default
	// DefaultHeadroom.
	Headroom time.Duration
	// DeregistrationDelay is an LB's deregistration delay; default the
	// header's.
	DeregistrationDelay time.Duration
}

// Defaults of Options.
const (
	DefaultQuantile = 0.99
	// DefaultMargin is the least margin: under it, the skew-free
	// pod-clock difference the preStop covers is still read through
	// millisecond stamps and one trial set.
	DefaultMargin = time.Second
	// DefaultHeadroom covers SIGTERM handling and process exit after the
	// last request drained.
	DefaultHeadroom = 5 * time.Second
)

// Summary aggregates a run: Add every trial, then Close, then read. Invalid
// trials are counted by reason and never enter a percentile.
type Summary struct {
	Header  *Header
	opts    Options
	records []*Record
	closed  bool

	doc     SummaryDoc
	samples map[string][]float64 // metric → valid trials' values (ns), trial order
	trials  map[string][]int     // metric → trial numbers of samples
	// fallback counts valid trials whose cover was measured from SIGTERM
	// for want of prestop_called.
	fallback int
}

// NewSummary returns an empty Summary for a run with header h (may be nil).
func NewSummary(h *Header, opts Options) *Summary {
	return &Summary{Header: h, opts: opts}
}

// Add adds one trial. Adding to a closed Summary panics: that is a bug.
func (s *Summary) Add(r *Record) {
	if s.closed {
		panic("results: Add on a closed Summary")
	}
	s.records = append(s.records, r)
}

// MarkInterrupted records that the run ended before its summary was
// written; reports say so.
func (s *Summary) MarkInterrupted() { s.doc.Interrupted = true }

// Close computes every distribution and the recommendation.
func (s *Summary) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.samples = map[string][]float64{}
	s.trials = map[string][]int{}
	d := &s.doc
	d.Kind = KindSummary
	d.Trials = len(s.records)
	for _, r := range s.records {
		if !r.Valid {
			if d.InvalidReasons == nil {
				d.InvalidReasons = map[string]int{}
			}
			for _, reason := range SplitReasons(r.InvalidReason()) {
				d.InvalidReasons[reason]++
			}
			continue
		}
		d.Valid++
		for k, n := range r.ClientFailures {
			if d.ClientFailures == nil {
				d.ClientFailures = map[string]int{}
			}
			d.ClientFailures[k] += n
		}
		for _, p := range Points {
			if v, ok := r.Offset(p); ok {
				s.add(p, r.Trial, v)
			}
		}
		for _, dl := range Deltas {
			if v, ok := r.Between(dl.From, dl.To); ok {
				s.add(dl.Name(), r.Trial, v)
			}
		}
		if v, from, ok := r.AfterTermination(); ok {
			s.add(metricCover, r.Trial, v)
			if from != StagePrestopCalled {
				s.fallback++
			}
		}
	}
	for _, p := range Points {
		if p != PointWindow && len(s.samples[p]) == 0 {
			continue
		}
		dist := newDist(p, s.samples[p])
		dist.MaxUncertaintyNS = int64(s.maxUncertainty(p))
		d.Stages = append(d.Stages, dist)
	}
	for _, dl := range Deltas {
		if n := dl.Name(); len(s.samples[n]) > 0 {
			d.Deltas = append(d.Deltas, newDist(n, s.samples[n]))
		}
	}
	d.Recommendation = s.recommend()
}

// metricCover is the per-trial traffic end − termination start (preStop, or
// SIGTERM without one) the recommendation covers.
const metricCover = "cover"

func (s *Summary) add(metric string, trial int, v time.Duration) {
	s.samples[metric] = append(s.samples[metric], float64(v))
	s.trials[metric] = append(s.trials[metric], trial)
}

func (s *Summary) maxUncertainty(p string) time.Duration {
	var u time.Duration
	for _, r := range s.records {
		if !r.Valid {
			continue
		}
		switch p {
		case PointWindow:
			u = max(u, r.MaxUncertainty(StageLastAccept), r.MaxUncertainty(StageLastRequest))
		default:
			u = max(u, r.MaxUncertainty(p))
		}
	}
	return u
}

func (s *Summary) mustClosed() {
	if !s.closed {
		panic("results: Summary read before Close")
	}
}

// Doc is the closed summary as a document: the results file's summary
// record and the json report.
func (s *Summary) Doc() *SummaryDoc {
	s.mustClosed()
	return &s.doc
}

// Records are the trials added, valid or not, in order.
func (s *Summary) Records() []*Record { return s.records }

// Samples are the valid trials' values of a metric (a point, a delta name,
// in ns) in trial order, and the trials they came from.
func (s *Summary) Samples(metric string) (values []float64, trials []int) {
	s.mustClosed()
	return s.samples[metric], s.trials[metric]
}

// Dist is the distribution of a metric: a point or a delta name (aliases
// "a->b" and "a..b" are accepted for "a→b").
func (s *Summary) Dist(metric string) (Dist, bool) {
	s.mustClosed()
	metric = NormalizeMetric(metric)
	for _, d := range s.doc.Stages {
		if d.Name == metric {
			return d, d.N > 0
		}
	}
	for _, d := range s.doc.Deltas {
		if d.Name == metric {
			return d, d.N > 0
		}
	}
	return Dist{Name: metric}, false
}

// Metrics are the names of every metric with at least one sample, points
// first, in report order.
func (s *Summary) Metrics() []string {
	s.mustClosed()
	var out []string
	for _, d := range s.doc.Stages {
		if d.N > 0 {
			out = append(out, d.Name)
		}
	}
	for _, d := range s.doc.Deltas {
		out = append(out, d.Name)
	}
	return out
}

// SplitReasons splits an invalid_reason that lists several reasons ("a; b")
// so each is counted on its own.
func SplitReasons(reason string) []string {
	var out []string
	for _, r := range strings.Split(reason, "; ") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return []string{"unspecified"}
	}
	return out
}

// SummaryDoc is a closed summary's data: the summary record of a results
// file and the json report. Durations are integer nanoseconds.
type SummaryDoc struct {
	Kind Kind `json:"kind"` // KindSummary
	// Trials counts every trial; Valid those in the percentiles.
	Trials int `json:"trials"`
	Valid  int `json:"valid"`
	// InvalidReasons counts invalid trials per reason; a trial with several
	// reasons counts under each.
	InvalidReasons map[string]int `json:"invalid_reasons,omitempty"`
	// Interrupted is set when the run ended before writing its summary.
	Interrupted bool `json:"interrupted,omitempty"`
	// Stages are offsets from T0 per point; Deltas stage-to-stage.
	Stages []Dist `json:"stages"`
	Deltas []Dist `json:"deltas,omitempty"`
	// ClientFailures are the load generator's failures in valid trials'
	// windows, by kind.
	ClientFailures map[string]int  `json:"client_failures,omitempty"`
	Recommendation *Recommendation `json:"recommendation,omitempty"`
}

// InvalidSorted lists the invalid reasons, most frequent first.
func (d *SummaryDoc) InvalidSorted() []string {
	keys := slices.Collect(maps.Keys(d.InvalidReasons))
	slices.SortFunc(keys, func(a, b string) int {
		if d.InvalidReasons[a] != d.InvalidReasons[b] {
			return d.InvalidReasons[b] - d.InvalidReasons[a]
		}
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
		return 0
	})
	return keys
}

// Summarize adds every trial of a decoded file to a new Summary, marks it
// interrupted when the file says so, and closes it.
func Summarize(f *File, opts Options) *Summary {
	s := NewSummary(f.Header, opts)
	for i := range f.Trials {
		s.Add(&f.Trials[i])
	}
	if f.Interrupted() {
		s.MarkInterrupted()
	}
	s.Close()
	return s
}
