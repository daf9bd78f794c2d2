package results

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The paths traffic takes to a probe pod, compared side by side.
const (
	// PathIngress is the tool's load through the ingress controller.
	PathIngress = "ingress"
	// PathClusterIP is the in-cluster runners' load through the Service's
	// ClusterIP, routed by kube-proxy on each runner's node.
	PathClusterIP = "clusterip"
	// PathDNSGRPC is the gRPC client that resolves the headless Service
	// (measure --grpc-dns-rate) and calls the pods' own addresses: no
	// proxy, its own connections.
	PathDNSGRPC = "dns-grpc"
)

// PathSummary is one path's end of traffic over the trials, as its client
// saw it (the last response routed to the deleted pod) and as the probe saw
// it (the last connection accepted from that path's peers).
type PathSummary struct {
	// Path is PathIngress or PathClusterIP; Stage the client-side stage
	// (client_last_routed, cluster_last_routed: latest over runners).
	Path  string `json:"path"`
	Stage string `json:"stage"`
	// Last is Stage's offset from T0; AfterNotReady its offset from
	// slice_not_ready (how long the path went on routing after the
	// EndpointSlice marked the endpoint not ready).
	Last          Dist `json:"last"`
	AfterNotReady Dist `json:"after_not_ready"`
	// ProbeLast is the probe's last_accept from this path's peers: the
	// runners' addresses for the ClusterIP path, every other peer for the
	// ingress path (with keep-alive upstream connections, the ingress's
	// last accept can precede its last request).
	ProbeLast Dist `json:"probe_last"`
	// Latest counts the trials, among Compared (those that timed both
	// paths), in which this path's end was the later one: the path that
	// sets the window.
	Latest   int `json:"latest"`
	Compared int `json:"compared"`
}

// RunnerAddrs are the addresses of the trial's in-cluster runners.
func (r *Record) RunnerAddrs() map[string]bool {
	out := map[string]bool{}
	for _, rn := range r.Runners {
		if rn.IP != "" {
			out[rn.IP] = true
		}
	}
	return out
}

// PathProbeLast is the latest last_accept offset from one path's peers:
// the runners' addresses for PathClusterIP, every other key for
// PathIngress. PathDNSGRPC has none: the probe counts its gRPC port's
// calls as requests, not traffic, so no last_accept is theirs.
func (r *Record) PathProbeLast(path string) (time.Duration, bool) {
	if path == PathDNSGRPC {
		return 0, false
	}
	runners := r.RunnerAddrs()
	var best time.Duration
	found := false
	for _, s := range r.Instances(StageLastAccept) {
		if runners[s.Key] != (path == PathClusterIP) {
			continue
		}
		if v := r.offset(s); !found || v > best {
			best, found = v, true
		}
	}
	return best, found
}

// grpcTrials are the trial's gRPC DNS clients' records: the tool's and
// each runner's.
func (r *Record) grpcTrials() []*GRPCTrial {
	var out []*GRPCTrial
	if r.GRPC != nil {
		out = append(out, r.GRPC)
	}
	for _, rn := range r.Runners {
		if rn.GRPC != nil {
			out = append(out, rn.GRPC)
		}
	}
	return out
}

// pathStage is the client-side stage that ends each path.
var pathStage = map[string]string{PathIngress: StageClientLastRouted, PathClusterIP: StageClusterLastRouted,
	PathDNSGRPC: StageGRPCLastRouted}

// closePaths builds SummaryDoc.Paths when some trial had another path than
// the ingress: runners, or the gRPC DNS client.
func (s *Summary) closePaths(o Options) {
	paths := []string{PathIngress}
	hasRunners, hasGRPC := false, false
	for _, r := range s.records {
		hasRunners = hasRunners || len(r.Runners) > 0
		hasGRPC = hasGRPC || len(r.grpcTrials()) > 0
	}
	if hasRunners {
		paths = append(paths, PathClusterIP)
	}
	if hasGRPC {
		paths = append(paths, PathDNSGRPC)
	}
	if len(paths) == 1 {
		return
	}
	type acc struct{ last, afterNR, probe sample }
	accs := map[string]*acc{}
	for _, p := range paths {
		accs[p] = &acc{}
	}
	latest, compared := map[string]int{}, map[string]int{}
	for _, r := range s.records {
		censored := r.Censored()
		ends := map[string]time.Duration{}
		for path, a := range accs {
			stage := pathStage[path]
			if v, ok := r.Offset(stage); ok && r.PointValid(stage) {
				a.last.add(r.Trial, float64(v), censored)
				ends[path] = v
				if nr, ok := r.Offset(StageSliceNotReady); ok && r.PointValid(StageSliceNotReady) {
					a.afterNR.add(r.Trial, float64(v-nr), censored)
				}
			}
			if v, ok := r.PathProbeLast(path); ok && r.PointValid(StageLastAccept) {
				a.probe.add(r.Trial, float64(v), censored)
			}
		}
		if _, ok := ends[PathDNSGRPC]; ok {
			for _, g := range r.grpcTrials() {
				if g.End == "" {
					continue // that client did not call the pod
				}
				if s.doc.GRPCEnds == nil {
					s.doc.GRPCEnds = map[string]int{}
				}
				s.doc.GRPCEnds[g.End]++
			}
		}
		// The path that ended last among those this trial timed.
		if len(ends) > 1 {
			last := ""
			for _, path := range paths {
				if v, ok := ends[path]; ok {
					compared[path]++
					if last == "" || v > ends[last] {
						last = path
					}
				}
			}
			latest[last]++
		}
	}
	for _, path := range paths {
		a, stage := accs[path], pathStage[path]
		s.doc.Paths = append(s.doc.Paths, PathSummary{
			Path: path, Stage: stage,
			Last:          newDist(stage, &a.last, o.Quantile, o.Confidence),
			AfterNotReady: newDist(Delta{StageSliceNotReady, stage}.Name(), &a.afterNR, o.Quantile, o.Confidence),
			ProbeLast:     newDist(StageLastAccept+"["+path+"]", &a.probe, o.Quantile, o.Confidence),
			Latest:        latest[path], Compared: compared[path],
		})
	}
}

// SetsWindow names the path whose end was the later one in most compared
// trials, and says so in words; "" when no trial timed both.
func (d *SummaryDoc) SetsWindow() (path, sentence string) {
	var best *PathSummary
	for i := range d.Paths {
		p := &d.Paths[i]
		if p.Compared > 0 && (best == nil || p.Latest > best.Latest) {
			best = p
		}
	}
	if best == nil {
		return "", "No trial timed more than one path: no comparison."
	}
	if best.Path == PathDNSGRPC {
		// The probe does not count the gRPC port's calls as traffic: the
		// window is the proxies' paths'.
		return best.Path, fmt.Sprintf("The %s path ended last in %d of %d trials that timed it beside another path: its client leaves a pod only when its connection ends (how: below), which no preStop sleep bounds; the window and the recommendation are the other paths'.",
			best.Path, best.Latest, best.Compared)
	}
	return best.Path, fmt.Sprintf("The %s path ended last in %d of %d trials that timed it beside another path: it sets the window, and the recommendation covers it.",
		best.Path, best.Latest, best.Compared)
}

// PathsNote is what the report prints under the paths table: which path
// ended last, and how the gRPC DNS clients' connections ended.
func (d *SummaryDoc) PathsNote() string {
	_, sentence := d.SetsWindow()
	return strings.TrimSpace(sentence + " " + d.GRPCEndsLine())
}

// GRPCEndsLine says how the gRPC DNS client's last connection to the
// deleted pods ended, "" without the client.
func (d *SummaryDoc) GRPCEndsLine() string {
	if len(d.GRPCEnds) == 0 {
		return ""
	}
	words := map[string]string{GRPCEndGoaway: "the server's GOAWAY", GRPCEndReset: "a reset", GRPCEndEOF: "a close without GOAWAY",
		GRPCEndDNS: "the client itself after a DNS answer without the pod", GRPCEndOpen: "still open at the trial's end", "": "unknown"}
	var parts []string
	for _, end := range slices.Sorted(maps.Keys(d.GRPCEnds)) {
		w := words[end]
		if w == "" {
			w = end
		}
		parts = append(parts, fmt.Sprintf("%s %d×", w, d.GRPCEnds[end]))
	}
	return "The dns-grpc clients' connections of their last calls to the deleted pod ended by " + strings.Join(parts, ", ") + " (grpc.end, grpc.mechanism in each trial)."
}

// pathRows renders the side-by-side table of the paths: per path its
// client-side end (offset from T0 and from slice_not_ready), the probe's
// view, and how often it ended last.
func pathRows(d *SummaryDoc) (cols []column, rows [][]string) {
	for i, h := range []string{"path", "last routed", "n", "p50", "p95", "max", "U", "after not-ready p50", "p95", "max", "probe last_accept max", "ended last"} {
		cols = append(cols, column{head: h, left: i < 2})
	}
	for _, p := range d.Paths {
		u, _ := boundCells(p.Last)
		rows = append(rows, []string{p.Path, p.Stage, fmt.Sprint(p.Last.N),
			cell(p.Last, p.Last.P50NS, 0.5), cell(p.Last, p.Last.P95NS, 0.95), cell(p.Last, p.Last.MaxNS, 1), u,
			cell(p.AfterNotReady, p.AfterNotReady.P50NS, 0.5), cell(p.AfterNotReady, p.AfterNotReady.P95NS, 0.95), cell(p.AfterNotReady, p.AfterNotReady.MaxNS, 1),
			cell(p.ProbeLast, p.ProbeLast.MaxNS, 1), fmt.Sprintf("%d/%d", p.Latest, p.Compared)})
	}
	return cols, rows
}

// pathsSplit is the first column of the paths table's second half when it
// is split to fit a terminal: "after not-ready p50".
const pathsSplit = 7
