package results

import (
	"maps"
	"slices"
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
	StageDNSRemoved,
	StagePrestopCalled,
	StageSigterm,
	StageLastAccept,
	StageLastRequest,
	StageListenerClosed,
	StageClientLastRouted,
	StageClusterLastRouted,
	StageGRPCLastRouted,
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
	// The DNS path (measure --dns): CoreDNS answers only ready endpoints,
	// so its answer drops the address when it sees the slice's ready=false.
	{StageSliceNotReady, StageDNSRemoved},
	{StageSliceNotReady, PointWindow},
	// kube-proxy drops an endpoint that turned ready=false from its rules
	// on its next sync (when the Service has other ready endpoints): this is
	// the ClusterIP path's reaction to the slice.
	{StageSliceNotReady, StageClusterLastRouted},
	// A gRPC client resolving the headless Service leaves a pod when its
	// connection ends, not when DNS drops the address (measure
	// --grpc-dns-rate).
	{StageSliceNotReady, StageGRPCLastRouted},
	{StagePodTerminatingSeen, StagePrestopCalled},
	{StagePrestopCalled, StageSigterm},
	{StagePrestopCalled, PointWindow},
	{StageSigterm, PointWindow},
}

// Options shape a Summary's recommendation and bounds. Zero fields take the
// header's values, then the defaults below.
type Options struct {
	// Quantile of (traffic end − prestop_called) the preStop must cover,
	// and of every stage the report bounds; default DefaultQuantile.
	Quantile float64
	// Confidence of those upper bounds; default DefaultConfidence.
	Confidence float64
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

// Defaults of Options. A 95% bound of the 95th percentile is the least
// claim worth pasting into platform docs, and the maximum of 59 trials
// makes it (1 − 0.95⁵⁹ ≥ 0.95): measure's default --trials.
const (
	DefaultQuantile   = 0.95
	DefaultConfidence = 0.95
	// DefaultMargin is the least margin: under it, the skew-free
	// pod-clock difference the preStop covers is still read through
	// millisecond stamps and one trial set.
	DefaultMargin = time.Second
	// DefaultHeadroom covers SIGTERM handling and process exit after the
	// last request drained.
	DefaultHeadroom = 5 * time.Second
)

// Summary aggregates a run: Add every trial, then Close, then read. Each
// metric takes every trial whose stages it needs are valid (see
// Record.PointValid); a trial that ran into the hold is censored and stays
// in, as a floor.
type Summary struct {
	Header  *Header
	opts    Options
	records []*Record
	closed  bool

	doc     SummaryDoc
	samples map[string]*sample // metric → its sample, trial order
	// fallback counts trials whose cover was measured from SIGTERM for
	// want of prestop_called.
	fallback int
	// fromDeletion counts trials whose cover runs from the deletion: the
	// sidecar's (measure --target), which sees no preStop call or SIGTERM.
	fromDeletion int
	// startupTrials counts trials with startup stages; routedEarly those
	// whose new pod was routed before it listened.
	startupTrials, routedEarly int
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
	s.samples = map[string]*sample{}
	o := s.options()
	d := &s.doc
	d.Kind = KindSummary
	d.Trials = len(s.records)
	d.Quantile, d.Confidence = o.Quantile, o.Confidence
	for _, r := range s.records {
		d.countReasons(r)
		d.ClientFailuresAll = AddCounts(d.ClientFailuresAll, r.ClientFailures)
		d.ClusterFailures = AddCounts(d.ClusterFailures, r.ClusterFailures)
		if r.GRPC != nil {
			d.GRPCFailures = AddCounts(d.GRPCFailures, r.GRPC.Failures)
		}
		for _, rn := range r.Runners {
			if rn.GRPC != nil {
				d.RunnerGRPCFailures = AddCounts(d.RunnerGRPCFailures, rn.GRPC.Failures)
			}
		}
		if r.Valid {
			d.Valid++
			d.ClientFailures = AddCounts(d.ClientFailures, r.ClientFailures)
		}
		censored := r.Censored()
		if censored {
			d.Censored++
		}
		for _, p := range Points {
			if !r.PointValid(p) {
				continue
			}
			if v, ok := r.Offset(p); ok {
				s.add(p, r.Trial, v, censored && censorable(p))
			}
		}
		for _, dl := range Deltas {
			if !r.PointValid(dl.From) || !r.PointValid(dl.To) {
				continue
			}
			if v, ok := r.Between(dl.From, dl.To); ok {
				s.add(dl.Name(), r.Trial, v, censored && censorable(dl.To))
			}
		}
		if v, from, ok := r.AfterTermination(); ok && r.PointValid(from) && r.PointValid(PointWindow) {
			s.add(metricCover, r.Trial, v, censored)
			switch from {
			case StageSigterm:
				s.fallback++
			case StageDeleteSent:
				s.fromDeletion++
			}
			// The DNS path from the same basis. A server still answering
			// when the trial ended (dns_listed) left dns_removed unknown
			// but at least its last answer: a floor, counted like a
			// window cut at the hold, never dropped (dropped, two
			// deletions DNS still answered at 59 s vanished from a bound
			// of 80 ms).
			switch {
			case r.PointValid(StageDNSRemoved):
				if v, ok := r.Between(from, StageDNSRemoved); ok {
					s.add(metricDNSCover, r.Trial, v, false)
				}
			case r.dnsListedOnly():
				if v, ok := r.Between(from, StageDNSLastPresent); ok {
					s.add(metricDNSCover, r.Trial, v, true)
				}
			}
		}
		s.addStartup(r)
	}
	for _, p := range Points {
		if p != PointWindow && s.samples[p].n() == 0 {
			continue
		}
		dist := newDist(p, s.samples[p], o.Quantile, o.Confidence)
		dist.MaxUncertaintyNS = int64(s.maxUncertainty(p))
		d.Stages = append(d.Stages, dist)
	}
	for _, dl := range Deltas {
		if n := dl.Name(); s.samples[n].n() > 0 {
			d.Deltas = append(d.Deltas, newDist(n, s.samples[n], o.Quantile, o.Confidence))
		}
	}
	d.Recommendation = s.recommend()
	s.closeStartup(o)
	s.closePaths(o)
}

// countReasons counts a trial's reasons by code, each code once per trial,
// and keeps the first detail of each code as an example.
func (d *SummaryDoc) countReasons(r *Record) {
	seen := map[string]bool{}
	for _, rs := range r.ReasonList() {
		if seen[rs.Code] {
			continue
		}
		seen[rs.Code] = true
		if d.InvalidReasons == nil {
			d.InvalidReasons = map[string]int{}
		}
		d.InvalidReasons[rs.Code]++
		if _, ok := d.ReasonExamples[rs.Code]; !ok && rs.Detail != "" {
			if d.ReasonExamples == nil {
				d.ReasonExamples = map[string]string{}
			}
			d.ReasonExamples[rs.Code] = rs.Detail
		}
	}
}

// AddCounts adds m's counts into into, by key, and returns into (made when
// nil and m has a key).
func AddCounts(into, m map[string]int) map[string]int {
	for k, n := range m {
		if into == nil {
			into = map[string]int{}
		}
		into[k] += n
	}
	return into
}

// metricCover is the per-trial traffic end − termination start (preStop, or
// SIGTERM without one) the recommendation covers.
const metricCover = "cover"

// metricDNSCover is the per-trial dns_removed − the same basis as
// metricCover (measure --dns).
const metricDNSCover = "dns_cover"

func (s *Summary) add(metric string, trial int, v time.Duration, censored bool) {
	smp := s.samples[metric]
	if smp == nil {
		smp = &sample{}
		s.samples[metric] = smp
	}
	smp.add(trial, float64(v), censored)
}

func (s *Summary) maxUncertainty(p string) time.Duration {
	var u time.Duration
	for _, r := range s.records {
		if !r.PointValid(p) {
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

// Samples are a metric's values (a point, a delta name, in ns) over the
// trials whose stages it needs are valid, in trial order, and the trials
// they came from. Censored trials' values are floors (see Censored).
func (s *Summary) Samples(metric string) (values []float64, trials []int) {
	s.mustClosed()
	if smp := s.samples[metric]; smp != nil {
		return smp.values, smp.trials
	}
	return nil, nil
}

// Censored is how many of a metric's samples are censored trials' floors.
func (s *Summary) Censored(metric string) int {
	s.mustClosed()
	if smp := s.samples[metric]; smp != nil {
		return smp.nCens
	}
	return 0
}

// Dist is the distribution of a metric: a point or a delta name (aliases
// "a->b" and "a..b" are accepted for "a→b").
func (s *Summary) Dist(metric string) (Dist, bool) {
	s.mustClosed()
	metric = NormalizeMetric(metric)
	for _, d := range s.doc.allDists() {
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
	for _, d := range s.doc.allDists() {
		if d.N > 0 {
			out = append(out, d.Name)
		}
	}
	return out
}

// allDists are every distribution, in report order: the shutdown side's
// points and deltas, then the startup side's.
func (d *SummaryDoc) allDists() []Dist {
	var out []Dist
	for _, part := range [][]Dist{d.Stages, d.Deltas, d.StartupStages, d.StartupDeltas} {
		out = append(out, part...)
	}
	return out
}

// RunCost is what a run cost the cluster and the machine that ran it, as
// measure counted it: the requests it sent to the API server (watches,
// lists and writes among them, the rest plain reads), the reads it made
// through the pod proxy and their bytes, how long it ran, and its process's
// peak RSS and CPU time.
type RunCost struct {
	APIRequests  int64 `json:"api_requests"`
	Watches      int64 `json:"watches,omitempty"`
	Lists        int64 `json:"lists,omitempty"`
	Writes       int64 `json:"writes,omitempty"`
	ProxyReads   int64 `json:"proxy_reads,omitempty"`
	ProxyBytes   int64 `json:"proxy_bytes,omitempty"`
	ElapsedNS    int64 `json:"elapsed_ns"`
	PeakRSSBytes int64 `json:"peak_rss_bytes,omitempty"`
	CPUNS        int64 `json:"cpu_ns,omitempty"`
}

// SummaryDoc is a closed summary's data: the summary record of a results
// file and the json report. Durations are integer nanoseconds.
type SummaryDoc struct {
	Kind Kind `json:"kind"` // KindSummary
	// Trials counts every trial; Valid those without any reason; Censored
	// those that ran into the hold (counted in n and every quantile).
	Trials   int `json:"trials"`
	Valid    int `json:"valid"`
	Censored int `json:"censored,omitempty"`
	// Quantile and Confidence are those of every Bound and of the
	// recommendation.
	Quantile   float64 `json:"quantile,omitempty"`
	Confidence float64 `json:"confidence,omitempty"`
	// InvalidReasons counts trials per reason code (a trial with several
	// codes counts under each); ReasonExamples holds one detail per code.
	InvalidReasons map[string]int    `json:"invalid_reasons,omitempty"`
	ReasonExamples map[string]string `json:"reason_examples,omitempty"`
	// Interrupted is set when the run ended before writing its summary.
	Interrupted bool `json:"interrupted,omitempty"`
	// Cost is what the run cost (measure's own counters; nil from a
	// summary that was not written by measure).
	Cost *RunCost `json:"cost,omitempty"`
	// Stages are offsets from T0 per point; Deltas stage-to-stage.
	Stages []Dist `json:"stages"`
	Deltas []Dist `json:"deltas,omitempty"`
	// ClientFailures are the load generator's failures in the windows of
	// valid trials, by kind; ClientFailuresAll those of every trial.
	ClientFailures    map[string]int  `json:"client_failures,omitempty"`
	ClientFailuresAll map[string]int  `json:"client_failures_all,omitempty"`
	Recommendation    *Recommendation `json:"recommendation,omitempty"`
	// StartupStages and StartupDeltas are the replacement pods' startup
	// (StartupPoints, StartupDeltas); StartupFailures the load's failures
	// attributed to it, by kind.
	StartupStages         []Dist                 `json:"startup_stages,omitempty"`
	StartupDeltas         []Dist                 `json:"startup_deltas,omitempty"`
	StartupFailures       map[string]int         `json:"startup_failures,omitempty"`
	StartupRecommendation *StartupRecommendation `json:"startup_recommendation,omitempty"`
	// Paths compare the ingress path and the ClusterIP path side by side;
	// set only when some trial had in-cluster runners. ClusterFailures are
	// the runners' failures in every trial, by kind.
	Paths           []PathSummary  `json:"paths,omitempty"`
	ClusterFailures map[string]int `json:"cluster_failures,omitempty"`
	// GRPCEnds counts, over the trials in which the gRPC DNS client called
	// the deleted pod, how the connection of its last call ended
	// (GRPCTrial.End).
	GRPCEnds map[string]int `json:"grpc_ends,omitempty"`
	// GRPCFailures are the failed calls of the tool's gRPC DNS client
	// (measure --grpc-dns-rate with --dns-server) in every trial, by kind;
	// RunnerGRPCFailures those of the in-cluster runners' gRPC clients.
	// Each is its own client: a run whose window is fine can still see a
	// DNS client fail every call once deletions outpaced its resolutions
	// (GRPCFailuresCause).
	GRPCFailures       map[string]int `json:"grpc_failures,omitempty"`
	RunnerGRPCFailures map[string]int `json:"runner_grpc_failures,omitempty"`
}

// InvalidSorted lists the reason codes, most frequent first.
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
