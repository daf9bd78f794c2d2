package results

import (
	"time"
)

// SchemaVersion is the version of the results file layout. Readers refuse a
// file whose header carries a newer version than they know, and read every
// older one.
//
// Version 2 gives each trial coded reasons (Reasons) instead of one
// free-text invalid_reason, and with them per-stage validity: a reason
// invalidates only the stages it corrupts, and a trial that ran into the
// hold is censored rather than dropped. Version-1 files are read with their
// reasons classified from the text (see Record.ReasonList).
//
// In-cluster runners (measure --in-cluster-load) add fields within version
// 2, all omitted when empty: Record.Runners, Record.ClusterFailures, the
// keyed stage cluster_last_routed and SummaryDoc.Paths. A version-2 reader
// that predates them ignores them and still reads a window that covers the
// ClusterIP path (the probe's last_accept is per peer, runners included).
// A runner's faults are notes on its Runner entry, never reason codes: an
// older reader would take an unknown code as invalidating every stage.
//
// The DNS stages (dns_last_present, dns_removed) and their reason codes
// (dns_blind, dns_listed) are additive within version 2 too. An older
// reader takes those codes as unknown and so invalidates every stage of
// such a trial: it drops the trial rather than trusting a wrong number.
//
// Header.Route (measure --route httproute: the Gateway, its class and
// controller) is additive within version 2 too: readers decode with
// encoding/json, which skips fields it does not know, and a file without it
// was measured through an Ingress.
const SchemaVersion = 2

// Kind tells the records of a results file apart: one header, one record per
// trial, and a final summary.
type Kind string

// The record kinds of a results file.
const (
	KindHeader  Kind = "header"
	KindTrial   Kind = "trial"
	KindSummary Kind = "summary"
)

// Clock names whose clock an instant was read on.
type Clock string

// The clocks a stage can be read on.
const (
	// ClockTool is the clock of the machine running epwindow.
	ClockTool Clock = "tool"
	// ClockPod is the probe's clock, corrected for the measured skew.
	ClockPod Clock = "pod"
	// ClockAPIServer is the API server's clock at 1 s resolution: cross-checks only.
	ClockAPIServer Clock = "apiserver"
	// ClockKubelet is a kubelet-reported metav1.Time (1 s resolution).
	ClockKubelet Clock = "kubelet"
	// ClockRunner is an in-cluster load runner's clock, corrected for its
	// measured skew.
	ClockRunner Clock = "runner"
)

// Stage names, as DESIGN.md's stage table defines them.
const (
	StageDeleteSent         = "delete_sent" // T0
	StageDeleteAcked        = "delete_acked"
	StagePodTerminatingSeen = "pod_terminating_seen"
	StageServerDeleteTime   = "server_delete_time" // 1 s cross-check only
	StageSliceNotReady      = "slice_not_ready"
	StageSliceNotServing    = "slice_not_serving"
	StageSliceRemoved       = "slice_removed"
	StageUpstreamLastSeen   = "upstream_last_present" // keyed by observer/replica
	StageUpstreamRemoved    = "upstream_removed"      // keyed by observer/replica
	// StageDNSLastPresent and StageDNSRemoved are the cluster DNS's answers
	// for the probe's headless Service (measure --dns): the last answer
	// that held the address and the first that did not, keyed
	// "dns/replica" (the DNS pod or server asked).
	StageDNSLastPresent   = "dns_last_present"
	StageDNSRemoved       = "dns_removed"
	StagePrestopCalled    = "prestop_called"
	StageSigterm          = "sigterm"
	StageLastAccept       = "last_accept" // keyed by peer address
	StageLastRequest      = "last_request"
	StageClientLastRouted = "client_last_routed"
	// StageGRPCLastRouted is the gRPC DNS client's last call answered by the
	// pod (measure --grpc-dns-rate), tool clock.
	StageGRPCLastRouted = "grpc_last_routed"
	StageContainerExit  = "container_exit"
	// StageListenerClosed is the first poll of measure --target's sidecar
	// that found the app's listener gone, pod clock: connections are
	// refused from then on.
	StageListenerClosed = "listener_closed"
	StagePodDeleted     = "pod_deleted"
	// StageClusterLastRouted is keyed by runner ("pod/node"; Runner.Key).
	StageClusterLastRouted = "cluster_last_routed"
)

// Stage is one timestamped event of a trial.
type Stage struct {
	// Name is one of the Stage* constants.
	Name string `json:"name"`
	// Key distinguishes the instances of a keyed stage: "observer/replica"
	// for upstream stages, the peer address for last_accept. Empty otherwise.
	Key string `json:"key,omitempty"`
	// At is the instant, absolute, on Clock (pod instants already corrected).
	At time.Time `json:"at"`
	// OffsetNS is At − T0 (delete_sent) in nanoseconds.
	OffsetNS int64 `json:"offset_ns"`
	// UncertaintyNS bounds the error of At: the skew bound for pod-clock
	// stages, the poll interval for upstream stages, 1 s for metav1.Time.
	UncertaintyNS int64 `json:"uncertainty_ns,omitempty"`
	// Clock is the clock At was read on.
	Clock Clock `json:"clock"`
}

// Offset is At − T0.
func (s Stage) Offset() time.Duration { return time.Duration(s.OffsetNS) }

// Record is one trial: one pod deleted and every stage seen for its address.
type Record struct {
	Kind  Kind   `json:"kind"` // KindTrial
	Trial int    `json:"trial"`
	Pod   string `json:"pod"`
	Node  string `json:"node,omitempty"`
	PodIP string `json:"pod_ip"`
	// Sidecar is the sidecar's account of the trial (measure --target).
	Sidecar *SidecarTrial `json:"sidecar,omitempty"`
	// Valid is set when the trial has no reason at all: every stage it
	// recorded is sound and nothing was cut short.
	Valid bool `json:"valid"`
	// Reasons say what went wrong, one coded entry per fault; each code
	// invalidates only the stages it corrupts (see ReasonStages), and
	// ReasonHoldReached censors the traffic end instead. Details never name
	// a command-line flag: the CLI adds those hints when it prints.
	Reasons []Reason `json:"reasons,omitempty"`
	// Invalid is a version-1 file's free-text reason ("; "-separated);
	// version-2 writers leave it empty. Read it through ReasonList.
	Invalid string `json:"invalid_reason,omitempty"`
	// T0 is delete_sent on the tool's clock; in rollout mode, where the
	// Deployment controller deletes the pods, pod_terminating_seen.
	T0 time.Time `json:"t0"`
	// T0Source names the stage T0 is ("delete_sent" or "pod_terminating_seen").
	T0Source string `json:"t0_source,omitempty"`
	// SkewNS is the probe clock's offset from the tool's (probe − tool) that
	// was subtracted from pod-clock stages, and SkewUncertaintyNS its bound.
	SkewNS            int64 `json:"skew_ns"`
	SkewUncertaintyNS int64 `json:"skew_uncertainty_ns"`
	// ClientFailures counts load-generator failures inside this trial's
	// window, by kind ("refused", "reset", "timeout", "status_502", ...).
	ClientFailures map[string]int `json:"client_failures,omitempty"`
	// NewPod and NewPodIP name the pod that replaced the deleted one, whose
	// startup stages (StagePodCreated …) the record carries.
	NewPod   string `json:"new_pod,omitempty"`
	NewPodIP string `json:"new_pod_ip,omitempty"`
	// StartupFailures counts the load generator's failures attributed to
	// the new pod's startup: scheduled after its address turned ready in the
	// slices and before its listener opened (a pod routed before it
	// listens). They are not in ClientFailures.
	StartupFailures map[string]int `json:"startup_failures,omitempty"`
	// StartupNote says why startup stages are missing, when some are (the
	// replacement was not routed within the settle timeout, its probe's
	// record could not be read). The trial's validity does not depend on it.
	StartupNote string `json:"startup_note,omitempty"`
	// Runners are the in-cluster load runners that sent traffic through the
	// Service's ClusterIP during this trial (measure --in-cluster-load).
	Runners []Runner `json:"runners,omitempty"`
	// ClusterFailures counts the runners' failures during this trial, by
	// kind, summed over the runners.
	ClusterFailures map[string]int `json:"cluster_failures,omitempty"`
	// Slice names the EndpointSlice that held the deleted pod's endpoint,
	// whose writes the slice stages are; SliceWrites counts the writes of
	// the Service's slices delivered while the trial ran (additive within
	// schema 2).
	Slice       string `json:"slice,omitempty"`
	SliceWrites int    `json:"slice_writes,omitempty"`
	// Streams is the trial's long-lived connections through the ingress
	// (measure --streams, streams.go), ClusterStreams the in-cluster
	// runners' through the ClusterIP; additive within version 2.
	Streams        *StreamTrial `json:"streams,omitempty"`
	ClusterStreams *StreamTrial `json:"cluster_streams,omitempty"`
	// GRPC is what the gRPC DNS client did with the pod (measure
	// --grpc-dns-rate); additive within version 2.
	GRPC   *GRPCTrial `json:"grpc,omitempty"`
	Stages []Stage    `json:"stages"`
}

// How a gRPC DNS client stopped using a deleted pod (GRPCTrial.End).
const (
	// GRPCEndGoaway: the server's GOAWAY ended the connection the last
	// call went out on (MaxConnectionAge, or a graceful stop).
	GRPCEndGoaway = "goaway"
	// GRPCEndReset, GRPCEndEOF: the connection was reset, or closed without
	// GOAWAY (the process exited).
	GRPCEndReset = "reset"
	GRPCEndEOF   = "eof"
	// GRPCEndDNS: the client closed the connection itself when a DNS answer
	// left the address out.
	GRPCEndDNS = "dns"
	// GRPCEndOpen: the connection was still open when the trial ended.
	GRPCEndOpen = "open"
)

// GRPCTrial is the gRPC DNS client's side of one trial, on the tool's
// clock: grpc_last_routed is its last call the pod answered; these say
// why there were no more.
type GRPCTrial struct {
	// End is how the connection that carried the last call ended
	// (GRPCEnd*), Mechanism the same in words, with what made the client
	// ask DNS again when End is GRPCEndDNS.
	End       string `json:"end"`
	Mechanism string `json:"mechanism"`
	// ConnEnded is when that connection ended, GoAway when a GOAWAY was
	// read on it (zero: none).
	ConnEnded time.Time `json:"conn_ended,omitzero"`
	GoAway    time.Time `json:"goaway,omitzero"`
	// ResolvedOut is the client's first DNS answer after T0 without the
	// address (zero: none came while the trial ran); Resolutions counts
	// the answers it got during the trial. grpc-go asks only after a
	// connection is lost, at most every MinResolutionInterval.
	ResolvedOut time.Time `json:"resolved_out,omitzero"`
	Resolutions int       `json:"resolutions"`
	// Failures counts the client's failed calls during the trial, by kind.
	Failures map[string]int `json:"failures,omitempty"`
}

// Runner is one in-cluster load runner as a trial saw it: a pod that sends
// load to the probe Service's ClusterIP, so its requests take the
// kube-proxy path of the node it runs on.
type Runner struct {
	Pod  string `json:"pod"`
	Node string `json:"node,omitempty"`
	// IP is the runner pod's address: kube-proxy DNATs pod → ClusterIP →
	// pod traffic without SNAT, so the probe records it as the peer of the
	// runner's connections (last_accept keyed by IP).
	IP string `json:"ip,omitempty"`
	// SkewNS is the runner clock's offset from the tool's (runner − tool),
	// subtracted from its instants, and SkewUncertaintyNS its bound; both
	// zero when Note says the clock could not be read.
	SkewNS            int64 `json:"skew_ns"`
	SkewUncertaintyNS int64 `json:"skew_uncertainty_ns"`
	// Failures are this runner's failures during the trial, by kind.
	Failures map[string]int `json:"failures,omitempty"`
	// Note says why the runner's cluster_last_routed is missing, when it
	// is (stats unreadable, no skew estimate, skew bound exceeded, no
	// response from the deleted pod).
	Note string `json:"note,omitempty"`
	// GRPC is the runner's gRPC DNS client's side of the trial (measure
	// --grpc-dns-rate with --in-cluster-load), on the tool's clock; its
	// grpc_last_routed is keyed by the runner.
	GRPC *GRPCTrial `json:"grpc,omitempty"`
}

// Key is the runner's key of keyed stages: "pod/node".
func (r Runner) Key() string { return r.Pod + "/" + r.Node }

// SidecarTrial is the sidecar's own account of a trial (measure --target):
// what it saw and what it could not.
type SidecarTrial struct {
	// Accepts counts the connections it saw on the app's ports over the
	// pod's life; KubeletAccepts those from the node's address (the
	// kubelet's probes), which stay out of the window.
	Accepts        int64 `json:"accepts"`
	KubeletAccepts int64 `json:"kubelet_accepts,omitempty"`
	// UnseenConnections are connections the pod accepted that opened and
	// went between two dumps (no TIME_WAIT on the pod's side): the window
	// cannot include them; absent when the counter was unreadable.
	UnseenConnections *int64 `json:"unseen_connections,omitempty"`
	// IntervalNS is the poll interval, MaxGapNS the longest gap between two
	// dumps: a stamp's lateness bound.
	IntervalNS int64 `json:"interval_ns"`
	MaxGapNS   int64 `json:"max_gap_ns"`
	// PeersOmitted peers were left out of its record (4 KiB); PollErrors
	// dumps failed.
	PeersOmitted int   `json:"peers_omitted,omitempty"`
	PollErrors   int64 `json:"poll_errors,omitempty"`
}
