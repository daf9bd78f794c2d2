package results

// KubeProxy is kube-proxy's own account of its rule syncs, read from its
// metrics endpoint when the run could reach it (measure
// --kube-proxy-metrics): figures since kube-proxy started, as its
// histograms hold them. Upper bounds come from histogram buckets: the true
// p99 is at or below them, never above.
type KubeProxy struct {
	URL string `json:"url"`
	// Err says why the metrics could not be read; the figures are then
	// absent.
	Err string `json:"error,omitempty"`
	// Mode is kube-proxy's proxy mode (its /proxyMode: "nftables",
	// "iptables", "ipvs"), SyncPeriodNS and MinSyncPeriodNS its
	// syncPeriod and minSyncPeriod (its /configz): what the operator
	// configured, and so settings of a history (SettingsOf). Empty or 0
	// when kube-proxy did not say.
	Mode            string `json:"mode,omitempty"`
	SyncPeriodNS    int64  `json:"sync_period_ns,omitempty"`
	MinSyncPeriodNS int64  `json:"min_sync_period_ns,omitempty"`
	// Syncs counts kubeproxy_sync_proxy_rules_duration_seconds observations
	// (one per full or partial sync), SyncMeanNS their mean and
	// SyncP99UpperNS the upper bound of the bucket that holds their p99.
	// When the p99 lies in the +Inf bucket, SyncP99UpperNS is 0 and
	// SyncP99AboveNS the largest finite bound, which the p99 exceeds.
	Syncs          int64 `json:"syncs,omitempty"`
	SyncMeanNS     int64 `json:"sync_mean_ns,omitempty"`
	SyncP99UpperNS int64 `json:"sync_p99_upper_ns,omitempty"`
	SyncP99AboveNS int64 `json:"sync_p99_above_ns,omitempty"`
	// NetworkProgramming* are the same for
	// kubeproxy_network_programming_duration_seconds, the histogram
	// ClusterLoader2's NetworkProgrammingLatency reads: from an endpoint
	// change's trigger time to its rules in place. It counts creations and
	// updates only: deletions carry no trigger time (see DESIGN).
	NetworkProgrammings          int64 `json:"network_programmings,omitempty"`
	NetworkProgrammingMeanNS     int64 `json:"network_programming_mean_ns,omitempty"`
	NetworkProgrammingP99UpperNS int64 `json:"network_programming_p99_upper_ns,omitempty"`
	NetworkProgrammingP99AboveNS int64 `json:"network_programming_p99_above_ns,omitempty"`
}
