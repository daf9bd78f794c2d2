package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/sidecar"
)

// Sources of a PodWindow's record.
const (
	// SourceTermination: the sidecar's termination message in the pod's
	// final status, written at its SIGTERM, after every app container
	// exited: its whole record.
	SourceTermination = "termination message"
	// SourcePodProxy: the latest GET /timeline through the API server's pod
	// proxy while the pod lived; traffic after that read is not in it.
	SourcePodProxy = "pod proxy"
)

// PodWindow is one replaced pod's window as its epwindow sidecar measured it
// (--sidecar): the last traffic it received, from its deletion. The sidecar
// sees connections and received bytes on the app's port(s), not requests
// (docs/sidecar.md); the verdict does not read it.
type PodWindow struct {
	Pod string `json:"pod"`
	// WindowNS is the latest last_accept or last_request of any peer but
	// the node's (the kubelet's probes), corrected to the tool's clock by
	// the sidecar's GET /clock, less the pod's deletion (verify's pod
	// watch first saw it terminating); negative when no traffic came after
	// the deletion. Absent when Unreadable.
	WindowNS *int64 `json:"window_ns,omitempty"`
	// UncertaintyNS bounds WindowNS: the clock offset's uncertainty plus
	// the sidecar's longest gap between two socket dumps.
	UncertaintyNS int64 `json:"uncertainty_ns,omitempty"`
	// Floor is set when the window is at least WindowNS, and FloorWhy says
	// why: the app stopped listening while its address was still ready in
	// the EndpointSlices (later connections were refused, not seen),
	// requests attributed to it failed, or the final record was missing.
	Floor    bool   `json:"floor,omitempty"`
	FloorWhy string `json:"floor_why,omitempty"`
	// ListenerClosedNS is when the app's listener closed, from the
	// deletion, tool clock.
	ListenerClosedNS *int64 `json:"listener_closed_ns,omitempty"`
	// UnseenConnections counts connections the sidecar could not see
	// (opened and closed between two dumps; sidecar.Timeline).
	UnseenConnections *int64 `json:"unseen_connections,omitempty"`
	// WithKubelet is set when the sidecar's totals were used (peers beyond
	// its cap): they include the kubelet's probes, which may make the
	// window longer than the app's traffic.
	WithKubelet bool `json:"with_kubelet,omitempty"`
	// Source is where the record came from: SourceTermination or
	// SourcePodProxy.
	Source string `json:"source,omitempty"`
	// Unreadable says why there is no window.
	Unreadable string `json:"unreadable,omitempty"`
}

// String reads "web-1: 1.204s ±15ms after its deletion (termination
// message)", with "≥ " and "(a floor: why)" for a floor, or
// "web-1: unreadable: why".
func (w PodWindow) String() string {
	if w.WindowNS == nil {
		why := w.Unreadable
		if why == "" {
			why = "no record"
		}
		return w.Pod + ": unreadable: " + why
	}
	unc := "±" + dur(w.UncertaintyNS)
	var s string
	if *w.WindowNS < 0 {
		s = fmt.Sprintf("%s: no traffic after its deletion (the last %s %s before it)", w.Pod, dur(-*w.WindowNS), unc)
	} else {
		ge := ""
		if w.Floor {
			ge = "≥ "
		}
		s = fmt.Sprintf("%s: %s%s %s after its deletion", w.Pod, ge, dur(*w.WindowNS), unc)
	}
	var notes []string
	if w.Floor {
		notes = append(notes, "a floor: "+w.FloorWhy)
	}
	if w.ListenerClosedNS != nil {
		notes = append(notes, "listener closed "+dur(*w.ListenerClosedNS)+" after the deletion")
	}
	if w.WithKubelet {
		notes = append(notes, "peers beyond the sidecar's cap counted, the kubelet's probes with them")
	}
	if n := w.UnseenConnections; n != nil && *n > 0 {
		notes = append(notes, fmt.Sprintf("%d connections unseen", *n))
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, "; ") + ")"
	}
	return s + " (" + w.Source + ")"
}

// Short reads "1.2s", "≥ 1.2s", "none after" (no traffic after the
// deletion) or "unreadable": a table cell.
func (w PodWindow) Short() string {
	switch {
	case w.WindowNS == nil:
		return "unreadable"
	case *w.WindowNS < 0:
		return "none after"
	case w.Floor:
		return "≥ " + dur(*w.WindowNS)
	}
	return dur(*w.WindowNS)
}

// sidecarState is what the tracker has of one pod's sidecar (--sidecar).
type sidecarState struct {
	// port is the sidecar's own port in the pod's spec; 0: the pod has no
	// sidecar.
	port int32
	// latest is the latest record read through the pod proxy; tried the
	// instant of the last read (tool clock), err its error when it failed.
	latest *sidecar.Timeline
	tried  time.Time
	err    string
	// skew is the sidecar's clock offset (GET /clock), skewErr why it
	// could not be estimated.
	skew    load.Estimate
	skewOK  bool
	skewErr string
	// final is the record in the pod's status (the sidecar's termination
	// message); finalErr why that message did not decode.
	final    *sidecar.Timeline
	finalErr string
}

// sidecarPort is the port of the pod's epwindow sidecar (its first TCP
// containerPort, set from its --listen by deploy.SidecarContainer), 0 when
// the pod has none.
func sidecarPort(spec corev1.PodSpec) int32 {
	c, _ := deploy.TemplateSidecar(corev1.PodTemplateSpec{Spec: spec})
	if c == nil {
		return 0
	}
	for _, p := range c.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			return p.ContainerPort
		}
	}
	return deploy.DefaultSidecarPort
}

// sidecarFinal reads the sidecar's termination message from the pod's
// status: a native sidecar is an init container, so it is among
// initContainerStatuses. ok is false while the sidecar has not terminated.
func sidecarFinal(p *corev1.Pod) (tl *sidecar.Timeline, ok bool, err error) {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name != deploy.SidecarContainerName || cs.State.Terminated == nil {
			continue
		}
		if cs.State.Terminated.Message == "" {
			return nil, true, fmt.Errorf("the sidecar terminated (exit %d) without a termination message", cs.State.Terminated.ExitCode)
		}
		t, err := sidecar.ParseTimeline([]byte(cs.State.Terminated.Message))
		if err != nil {
			return nil, true, fmt.Errorf("its termination message: %w", err)
		}
		return &t, true, nil
	}
	return nil, false, nil
}

// How the sidecars are read through the pod proxy.
const (
	// sidecarEvery is how often a terminating pod's record is read: the
	// pod proxy's answer is the fallback when the final status carries no
	// termination message, late by up to this.
	sidecarEvery = time.Second
	// sidecarIdleEvery is how often a pod not terminating is read: only
	// its clock (read once) and a first record matter before its deletion.
	sidecarIdleEvery = 10 * time.Second
	// sidecarTimeout bounds one read.
	sidecarTimeout = 2 * time.Second
	// sidecarClockSamples is how many GET /clock estimate its offset; the
	// shortest round trip wins (load.ClockSample), as measure --target does.
	sidecarClockSamples = 5
)

// readSidecars reads the sidecar of every pod that has one, through the pod
// proxy, every sidecarEvery until ctx ends.
func (t *tracker) readSidecars(ctx context.Context) {
	tick := time.NewTicker(sidecarEvery)
	defer tick.Stop()
	for {
		t.readSidecarsOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readSidecarsOnce reads every sidecar due (sidecarDue), in parallel.
func (t *tracker) readSidecarsOnce(ctx context.Context) {
	now := t.clk.Now()
	var wg sync.WaitGroup
	for uid, p := range t.snapshot() {
		if !sidecarDue(p, now) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.readSidecar(ctx, uid, p)
		}()
	}
	wg.Wait()
}

// sidecarDue: a pod with a sidecar and an address, not gone and without its
// final record, is read every time while terminating, else every
// sidecarIdleEvery.
func sidecarDue(p podState, now time.Time) bool {
	switch {
	case p.sidecar.port == 0 || p.ip == "" || !p.gone.IsZero() || p.sidecar.final != nil:
		return false
	case !p.deleted.IsZero():
		return true
	}
	return p.sidecar.tried.IsZero() || now.Sub(p.sidecar.tried) >= sidecarIdleEvery
}

// readSidecar reads one pod's sidecar: its clock until an offset is known,
// then GET /timeline.
func (t *tracker) readSidecar(ctx context.Context, uid types.UID, p podState) {
	port := strconv.Itoa(int(p.sidecar.port))
	get := func(ctx context.Context, path string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, sidecarTimeout)
		defer cancel()
		body, err := t.client.CoreV1().Pods(t.ns).ProxyGet("http", p.name, port, path, nil).DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("GET %s of pod %s/%s port %s through the pod proxy: %w", path, t.ns, p.name, port, err)
		}
		return body, nil
	}
	var est *load.Estimate
	var estErr error
	if !p.sidecar.skewOK {
		e, err := load.ClockSample(ctx, t.clk, func(ctx context.Context) (time.Time, error) {
			body, err := get(ctx, "/clock")
			if err != nil {
				estErr = err // the last one says it: ClockSample's joins them all
				return time.Time{}, err
			}
			var c probe.ClockReply
			if err := json.Unmarshal(body, &c); err != nil || c.UnixNS == 0 {
				estErr = fmt.Errorf("GET /clock of pod %s/%s: unexpected body %.100q", t.ns, p.name, body)
				return time.Time{}, estErr
			}
			return time.Unix(0, c.UnixNS), nil
		}, sidecarClockSamples)
		est = &e
		if err == nil {
			estErr = nil
		} else if estErr == nil {
			estErr = err // ctx ended before any exchange
		}
	}
	tried := t.clk.Now()
	var tl *sidecar.Timeline
	body, err := get(ctx, "/timeline")
	if err == nil {
		var parsed sidecar.Timeline
		if parsed, err = sidecar.ParseTimeline(body); err == nil {
			tl = &parsed
		} else {
			err = fmt.Errorf("pod %s/%s: %w (use the same epwindow version for the sidecar image)", t.ns, p.name, err)
		}
	}
	if ctx.Err() != nil {
		return // stopping, not the sidecar's failure
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.pods[uid]
	if s == nil {
		return
	}
	sc := &s.sidecar
	sc.tried = tried
	if est != nil {
		if estErr == nil {
			sc.skew, sc.skewOK, sc.skewErr = *est, true, ""
		} else {
			sc.skewErr = estErr.Error()
		}
	}
	if tl != nil {
		sc.latest, sc.err = tl, ""
	} else {
		sc.err = err.Error()
	}
}

// podWindow is a replaced pod's window from its sidecar's record (PodWindow);
// failed counts the failed requests attributed to the pod's shutdown.
func podWindow(p podState, failed int) PodWindow {
	w := PodWindow{Pod: p.name}
	sc := p.sidecar
	tl, source := sc.final, SourceTermination
	if tl == nil {
		tl, source = sc.latest, SourcePodProxy
	}
	if tl == nil {
		var why []string
		switch {
		case sc.port == 0 && sc.tried.IsZero():
			why = append(why, "no "+deploy.SidecarContainerName+" container in the pod")
		case sc.err != "":
			why = append(why, sc.err)
		case sc.tried.IsZero():
			why = append(why, "its sidecar was never read through the pod proxy")
		}
		if sc.finalErr != "" {
			why = append(why, sc.finalErr)
		} else if sc.port != 0 {
			why = append(why, "no termination message in its final status")
		}
		w.Unreadable = strings.Join(why, "; ")
		return w
	}
	w.Source = source
	if !sc.skewOK {
		why := sc.skewErr
		if why == "" {
			why = "never read"
		}
		w.Unreadable = "its sidecar's clock could not be read (GET /clock through the pod proxy): " + why
		return w
	}
	last, withKubelet := lastTraffic(tl, p.hostIP)
	if last == nil {
		w.Unreadable = "no traffic in its sidecar's record from any peer but the node's (the kubelet's probes)"
		return w
	}
	d := int64(sc.skew.ToTool(*last).Sub(p.deleted))
	w.WindowNS = &d
	w.UncertaintyNS = int64(sc.skew.Uncertainty) + max(tl.Poll.MaxGapNS, tl.Poll.IntervalNS)
	w.UnseenConnections = tl.UnseenConnections
	var floor []string
	if c := tl.ListenerClosed; c != nil {
		closed := sc.skew.ToTool(*c)
		cd := int64(closed.Sub(p.deleted))
		w.ListenerClosedNS = &cd
		// Connections were refused from then on, so no later accept shows
		// how long routing went on.
		if p.leftSlices.IsZero() || closed.Before(p.leftSlices) {
			floor = append(floor, "the app stopped listening while its address was still ready in the EndpointSlices: later connections were refused, not seen")
		}
	}
	if failed > 0 {
		floor = append(floor, fmt.Sprintf("%d failed requests attributed to its shutdown: traffic its sidecar could not see", failed))
	}
	if source == SourcePodProxy {
		read := ""
		if !tl.Now.IsZero() {
			read = " " + dur(int64(sc.skew.ToTool(tl.Now).Sub(p.deleted))) + " after the deletion"
		}
		floor = append(floor, "no termination message in its final status; read through the pod proxy"+read+", later traffic unseen")
	}
	w.WithKubelet = withKubelet
	w.Floor, w.FloorWhy = len(floor) > 0, strings.Join(floor, "; ")
	return w
}

// lastTraffic is the latest last_accept or last_request of any peer but
// hostIP (the node's: the kubelet's probes). Peers beyond the sidecar's cap
// (PeersOverflow) are only in its totals, which then count, the kubelet's
// with them (withKubelet). Peers left out of a rendering (PeersOmitted, the
// termination message's 4 KiB) are those of the oldest activity, so they
// matter only when no other peer is listed.
func lastTraffic(tl *sidecar.Timeline, hostIP string) (last *time.Time, withKubelet bool) {
	later := func(t *time.Time) {
		if t != nil && (last == nil || t.After(*last)) {
			last = t
		}
	}
	for _, p := range tl.Peers {
		if p.Addr == hostIP {
			continue
		}
		later(p.LastAccept)
		later(p.LastRequest)
	}
	if tl.PeersOverflow > 0 || tl.PeersOmitted > 0 && last == nil {
		later(tl.LastAccept)
		later(tl.LastRequest)
		withKubelet = true
	}
	// Connections no dump saw (opened and gone between two polls: a proxy
	// that closes first leaves no TIME_WAIT on the pod's side) have no
	// peer, but the poll that counted them bounds when (docs/sidecar.md).
	later(tl.LastUnseen)
	return last, withKubelet
}

// sidecarWindows is the window of each replaced pod of a rollout (old) that
// was deleted, by pod name.
func sidecarWindows(pods, old map[types.UID]podState, failures []Failure) []PodWindow {
	var out []PodWindow
	for uid := range old {
		p, ok := pods[uid]
		if !ok || p.deleted.IsZero() {
			continue
		}
		failed := 0
		for _, f := range failures {
			if f.Pod == p.name && f.Side == SideShutdown {
				failed++
			}
		}
		out = append(out, podWindow(p, failed))
	}
	slices.SortFunc(out, func(a, b PodWindow) int { return strings.Compare(a.Pod, b.Pod) })
	return out
}

// noSidecar is --sidecar's error for a Deployment whose pod template has no
// epwindow sidecar: how to add it.
func noSidecar(d *appsv1.Deployment) error {
	ports := ""
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				ports += " --port " + strconv.Itoa(int(p.ContainerPort))
			}
		}
	}
	if ports == "" {
		ports = " --port PORT"
	}
	return usage("deployment %s/%s has no %s container in its pod template, which --%s reads each replaced pod's window from: keep it in the Deployment with epwindow manifests --sidecar --name %s%s (docs/sidecar.md, \"Keeping it in a staging overlay\"), or measure with epwindow measure --target deployment/%s, which adds it for a run",
		d.Namespace, d.Name, deploy.SidecarContainerName, FlagSidecar, d.Name, ports, d.Name)
}
