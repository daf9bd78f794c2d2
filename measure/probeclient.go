package measure

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
)

// probeClient talks to probe pods through the API server's pod proxy
// (pods/proxy), so the tool needs no route to pod addresses.
type probeClient struct {
	client kubernetes.Interface
	ns     string
	port   int32
}

// probeAPI is what the runner asks of a probe pod through the API server's
// pod proxy (probeClient); tests give the runner a fake.
type probeAPI interface {
	timeline(ctx context.Context, pod string) (*probe.Timeline, error)
	release(ctx context.Context, pod string) error
	probeClock(ctx context.Context, pod string) (time.Time, error)
}

func (p probeClient) portName(pod string) string {
	return pod + ":" + strconv.Itoa(int(p.port))
}

// get reads GET /<path> of pod's port through the pod proxy, within 5 s.
func (p probeClient) get(ctx context.Context, pod, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.client.CoreV1().RESTClient().Get().Namespace(p.ns).Resource("pods").
		Name(p.portName(pod)).SubResource("proxy").Suffix(path).DoRaw(ctx)
}

// timeline reads GET /timeline of a running (possibly terminating) probe.
func (p probeClient) timeline(ctx context.Context, pod string) (*probe.Timeline, error) {
	body, err := p.get(ctx, pod, "timeline")
	if err != nil {
		return nil, fmt.Errorf("read probe timeline of pod %s/%s through the pod proxy (needs get pods/proxy): %w", p.ns, pod, err)
	}
	return decodeTimeline(body)
}

// release ends a terminating probe's hold (POST /release).
func (p probeClient) release(ctx context.Context, pod string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := p.client.CoreV1().RESTClient().Post().Namespace(p.ns).Resource("pods").
		Name(p.portName(pod)).SubResource("proxy").Suffix("release").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("release probe pod %s/%s through the pod proxy (needs create pods/proxy): %w", p.ns, pod, err)
	}
	return nil
}

// probeClock reads GET /clock: the probe's time.
func (p probeClient) probeClock(ctx context.Context, pod string) (time.Time, error) {
	body, err := p.get(ctx, pod, "clock")
	if err != nil {
		return time.Time{}, fmt.Errorf("read probe clock of pod %s/%s: %w", p.ns, pod, err)
	}
	var c probe.ClockReply
	if err := json.Unmarshal(body, &c); err != nil || c.UnixNS == 0 {
		return time.Time{}, fmt.Errorf("probe clock of pod %s/%s: unexpected body %.100q", p.ns, pod, body)
	}
	return time.Unix(0, c.UnixNS), nil
}

// runnerAPI is what the run asks of its in-cluster load runners through the
// pod proxy: their statistics, with their stream events from a cursor on,
// and their clock (GET /clock, the probe's shape).
type runnerAPI interface {
	runnerStats(ctx context.Context, pod string, streamsSince int64) (load.Stats, error)
	probeClock(ctx context.Context, pod string) (time.Time, error)
}

// runnerStats reads a load runner's GET /stats (p.port is its stats port),
// its stream events from number since of its log on.
func (p probeClient) runnerStats(ctx context.Context, pod string, since int64) (load.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := p.client.CoreV1().RESTClient().Get().Namespace(p.ns).Resource("pods").
		Name(p.portName(pod)).SubResource("proxy").Suffix("stats").
		Param(load.QueryStreamsSince, strconv.FormatInt(since, 10)).DoRaw(ctx)
	if err != nil {
		return load.Stats{}, fmt.Errorf("read runner stats of pod %s/%s through the pod proxy (needs get pods/proxy): %w", p.ns, pod, err)
	}
	return load.ParseStats(body)
}

func decodeTimeline(body []byte) (*probe.Timeline, error) {
	tl, err := probe.ParseTimeline(body)
	if err != nil {
		return nil, fmt.Errorf("%w (use the same epwindow version for the probe image)", err)
	}
	return &tl, nil
}

// terminationTimeline returns the timeline the probe container wrote as its
// termination message, if the pod status carries one.
func terminationTimeline(pod *corev1.Pod, container string) (*probe.Timeline, *corev1.ContainerStateTerminated) {
	if pod == nil {
		return nil, nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container || cs.State.Terminated == nil {
			continue
		}
		term := cs.State.Terminated
		tl, err := decodeTimeline([]byte(term.Message))
		if err != nil {
			return nil, term
		}
		return tl, term
	}
	return nil, nil
}
