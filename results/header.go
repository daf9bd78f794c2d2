package results

import "time"

// Header is the first record of a results file: what was measured, where and
// with which settings. Every field but Kind and Schema is optional for a
// reader: a report renders whatever the header carries.
type Header struct {
	Kind Kind `json:"kind"` // KindHeader
	// Schema is SchemaVersion of the writer.
	Schema      int       `json:"schema"`
	ToolVersion string    `json:"tool_version,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	// ServerVersion is the cluster's API server version (GitVersion).
	ServerVersion string `json:"server_version,omitempty"`
	// Cluster names the cluster as the user knows it (kubeconfig context).
	Cluster string  `json:"cluster,omitempty"`
	Ingress Ingress `json:"ingress"`
	// Route is what carried the load to the probe Service: an Ingress, or
	// an HTTPRoute on a Gateway (additive within schema 2; absent in older
	// files, which were all through an Ingress).
	Route Route `json:"route,omitzero"`
	// Observers are the upstream observers of the run; their Resolution
	// bounds the recommendation's margin from below.
	Observers []Observer `json:"observers,omitempty"`
	// Mode is "delete" (one pod at a time) or "rollout".
	Mode      string `json:"mode,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Replicas  int    `json:"replicas,omitempty"`
	// Rate is the load generator's requests per second; Keepalive whether
	// it reused connections.
	Rate      float64 `json:"rate,omitempty"`
	Keepalive bool    `json:"keepalive,omitempty"`
	// DrainNS is --drain, the longest request the app must finish after
	// SIGTERM; it feeds terminationGracePeriodSeconds.
	DrainNS int64 `json:"drain_ns,omitempty"`
	// DeregistrationDelayNS is a load balancer's deregistration delay when
	// one applies (e.g. AWS target groups): preStop must exceed it.
	DeregistrationDelayNS int64 `json:"deregistration_delay_ns,omitempty"`
	// HoldNS is how long a deleted probe was held at most: a trial that ran
	// into it is censored there (schema 2).
	HoldNS int64 `json:"hold_ns,omitempty"`
	// Quantile and Confidence are the run's recommendation settings; a
	// report of the file uses them unless told otherwise (schema 2).
	Quantile   float64 `json:"quantile,omitempty"`
	Confidence float64 `json:"confidence,omitempty"`
	// InClusterLoad is how many in-cluster load runners sent InClusterRate
	// requests per second each through the probe Service's ClusterIP (0:
	// none; the fields are additive within schema 2).
	InClusterLoad int     `json:"in_cluster_load,omitempty"`
	InClusterRate float64 `json:"in_cluster_rate,omitempty"`
	// GRPCDNS is the gRPC client of measure --grpc-dns-rate, if one ran.
	GRPCDNS *GRPCDNS `json:"grpc_dns,omitempty"`
	// Target is the team's workload measure --target measured in place,
	// with the sidecar as the witness (nil: epwindow's own probe).
	Target *Target `json:"target,omitempty"`
	// KubeProxy is kube-proxy's sync figures when the run read them
	// (additive within schema 2).
	KubeProxy *KubeProxy `json:"kube_proxy,omitempty"`
	// Flags are the command-line flags of the run, as given.
	Flags map[string]string `json:"flags,omitempty"`
}

// Ingress is the ingress controller the traffic went through.
type Ingress struct {
	Class      string `json:"class,omitempty"`
	Controller string `json:"controller,omitempty"`
	Version    string `json:"version,omitempty"`
	// VersionNote says why Version is empty ("not exposed": the
	// controller reports none where the observer reads it).
	VersionNote string `json:"version_note,omitempty"`
	// Settings are the controller settings that shape the window, as far
	// as visible (e.g. "source-poll-timeout": "3000").
	Settings map[string]string `json:"settings,omitempty"`
}

// Route kinds of Route.Kind, as the API names them.
const (
	RouteKindIngress   = "Ingress"
	RouteKindHTTPRoute = "HTTPRoute"
)

// Route is the object that routed the load to the probe Service.
type Route struct {
	// Kind is RouteKindIngress or RouteKindHTTPRoute.
	Kind string `json:"kind,omitempty"`
	// Gateway is the HTTPRoute's parent, NAMESPACE/NAME or
	// NAMESPACE/NAME/SECTION; GatewayClass its class and Controller that
	// class's controllerName, the implementation whose propagation was
	// measured. Empty with an Ingress (Header.Ingress says its class).
	Gateway      string `json:"gateway,omitempty"`
	GatewayClass string `json:"gateway_class,omitempty"`
	Controller   string `json:"controller,omitempty"`
}

// Observer describes one upstream observer of the run.
type Observer struct {
	Name string `json:"name"`
	// ResolutionNS is how finely its upstream_removed instants resolve: the
	// p99 spacing kept between polls (at least the interval; more after a
	// back-off) plus the p99 poll time, measured before the first trial
	// (files before the poll figures hold the interval alone). A trial's
	// upstream_last_present uncertainty is the same figure at its end.
	ResolutionNS int64             `json:"resolution_ns"`
	Settings     map[string]string `json:"settings,omitempty"`
	// The poll figures behind ResolutionNS (additive within schema 2):
	// the interval asked for, the polls made before the header was
	// written, how many took longer than the interval (each followed by a
	// back-off), the p99 (nearest rank; the maximum below 100 polls) and
	// longest poll time, the p99 start-to-start spacing the polls kept,
	// and the bytes read from the controller per minute.
	IntervalNS     int64   `json:"interval_ns,omitempty"`
	Polls          int     `json:"polls,omitempty"`
	Overruns       int     `json:"overruns,omitempty"`
	PollP99NS      int64   `json:"poll_p99_ns,omitempty"`
	PollMaxNS      int64   `json:"poll_max_ns,omitempty"`
	PollSpacingNS  int64   `json:"poll_spacing_ns,omitempty"`
	BytesPerMinute float64 `json:"bytes_per_minute,omitempty"`
}

// DNSObserver names the header's DNS observer (measure --dns), whose
// settings carry the TTL its answers had.
const DNSObserver = "dns"

// DNSTTL is the longest TTL the run's DNS answers carried (the dns
// observer's "ttl" setting); ok is false without --dns or when no answer
// held a record.
func (h *Header) DNSTTL() (ttl time.Duration, ok bool) {
	if h == nil {
		return 0, false
	}
	for _, o := range h.Observers {
		if o.Name != DNSObserver {
			continue
		}
		d, err := time.ParseDuration(o.Settings["ttl"])
		return d, err == nil && d >= 0
	}
	return 0, false
}

// Resolution is how finely the observer's readings resolve a change.
func (o Observer) Resolution() time.Duration { return time.Duration(o.ResolutionNS) }

// WorstResolution is the coarsest resolution among the header's observers,
// 0 when there are none.
func (h *Header) WorstResolution() time.Duration {
	if h == nil {
		return 0
	}
	var worst time.Duration
	for _, o := range h.Observers {
		worst = max(worst, o.Resolution())
	}
	return worst
}

// GRPCDNS is a run's gRPC client that resolved the headless Service:
// grpc-go's dns resolver and round_robin, calling the probe's gRPC port.
type GRPCDNS struct {
	// Target is the tool's client's grpc-go target (dns://SERVER/NAME:PORT;
	// "" when only runners ran one), RunnerTarget the in-cluster runners'
	// (dns:///NAME:PORT, their pods' resolv.conf; "" without runners), Rate
	// each client's calls per second.
	Target       string  `json:"target,omitempty"`
	RunnerTarget string  `json:"runner_target,omitempty"`
	Rate         float64 `json:"rate"`
	// MaxConnectionAgeNS is the probe's grpc-go MaxConnectionAge (0: none).
	MaxConnectionAgeNS int64 `json:"max_connection_age_ns,omitempty"`
	// MinResolutionIntervalNS is grpc-go's floor between two DNS
	// resolutions of the client (its dns resolver's MinResolutionInterval).
	MinResolutionIntervalNS int64 `json:"min_resolution_interval_ns"`
}

// Target is a team's own workload that measure --target measured: its
// pods were evicted one at a time and the epwindow sidecar in each was the
// witness of its traffic (docs/sidecar.md).
type Target struct {
	// Kind and Name are the workload's ("Deployment", "checkout");
	// Namespace is its namespace.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Services are the Services selecting its pods; Route the Ingress or
	// HTTPRoute whose load was sent ("Ingress/NAME"; "" with the app's own
	// traffic or no route found).
	Services []string `json:"services,omitempty"`
	Route    string   `json:"route,omitempty"`
	// Ports are the app's ports the sidecar watched.
	Ports []int32 `json:"ports,omitempty"`
	// Witness is "sidecar".
	Witness string `json:"witness"`
}

// String is "Deployment ns/name".
func (t *Target) String() string { return t.Kind + " " + t.Namespace + "/" + t.Name }
