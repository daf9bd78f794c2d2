package upstream

import (
	"context"
	"net/netip"
	"time"
)

// Target names what an observer watches: the upstreams a controller routes
// to for one Service port, reached through one Ingress or one HTTPRoute.
type Target struct {
	Namespace string
	Service   string
	// Port is the Service port the Ingress backend or the HTTPRoute
	// backendRef names (by number).
	Port int32
	// Ingress is the Ingress's name; "" when the Target is reached through a
	// Gateway.
	Ingress string
	// Route is the HTTPRoute's name when the Target is reached through a
	// Gateway, else "". Controllers that name their upstreams after routes
	// (Envoy Gateway's clusters) need it; Ingress and Route never both
	// matter for one run.
	Route string
	Host  string
}

// ReplicaUpstreams is one controller replica's view at one poll.
type ReplicaUpstreams struct {
	// Replica names the controller replica (pod name, or URL for a single
	// endpoint).
	Replica string
	// Upstreams are the addresses that receive *new* traffic for the Target.
	// Fenced, draining or otherwise non-routable hosts are left out.
	Upstreams []netip.AddrPort
	// Err is set when this replica could not be read at this poll: the
	// observer is blind for it, and nothing may be concluded from absence.
	Err error
	// Sent and At bracket this replica's reading on the tool's clock: the
	// request left at Sent and its response arrived at At. The controller
	// read its own state somewhere in between.
	Sent time.Time
	At   time.Time
	// Bytes is how much this reading took from the controller: the bodies
	// of its responses (after any transfer decoding).
	Bytes int64
}

// Snapshot is one poll of an observer.
type Snapshot struct {
	// At is stamped on the tool's clock when the last response of the poll
	// arrived; Sent when the poll began. The truth lies in between.
	Sent     time.Time
	At       time.Time
	Replicas []ReplicaUpstreams
}

// Versioner is an Observer that knows the controller's version (from its
// pods' images, or from the controller's own API when it is read by URL);
// measure writes it into the results header. It never fails: "" means
// unknown.
type Versioner interface {
	Version(ctx context.Context) string
}

// Observer reads an ingress controller's or load balancer's own live view of
// its upstreams.
type Observer interface {
	// Name is the observer kind: "skipper", "nginx", "cmd", ...
	Name() string
	// Resolution is how finely its readings resolve a change: its poll
	// interval, reported with every upstream stage.
	Resolution() time.Duration
	// Settings are the controller settings that shape the window, as far as
	// visible (e.g. "sync-rate-limit": "0.3"). Nil when none are.
	Settings(ctx context.Context) map[string]string
	// Poll reads every replica once.
	Poll(ctx context.Context) (Snapshot, error)
	// Close releases what the observer holds (port-forwards, processes).
	Close() error
}
