package measure

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// heartbeatEvery is how often the API server is asked /readyz; stallAfter
// is the silence that counts as a stall. Watch events are only as timely as
// the API server: when it stops answering, a stage stamped by a watch can be
// late by the whole outage, so a trial that overlaps a stall is invalid.
const (
	heartbeatEvery = 250 * time.Millisecond
	stallAfter     = 2 * time.Second
)

// stall is an interval in which the API server did not answer.
type stall struct{ from, to time.Time }

// heartbeat records API server stalls.
type heartbeat struct {
	client kubernetes.Interface
	clock  clock.WithTicker

	mu     sync.Mutex
	lastOK time.Time
	stalls []stall // bounded: only the most recent are kept
}

func newHeartbeat(c kubernetes.Interface, clk clock.WithTicker) *heartbeat {
	return &heartbeat{client: c, clock: clk, lastOK: clk.Now()}
}

// run asks /readyz every heartbeatEvery until ctx ends.
func (h *heartbeat) run(ctx context.Context) error {
	t := h.clock.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		rctx, cancel := context.WithTimeout(ctx, stallAfter)
		err := h.client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(rctx).Error()
		cancel()
		if err == nil {
			h.ok(h.clock.Now())
		}
	}
}

// ok records an answer at now, closing a stall if the previous answer was
// longer than stallAfter ago.
func (h *heartbeat) ok(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Sub(h.lastOK) > stallAfter {
		if len(h.stalls) == 64 {
			h.stalls = h.stalls[1:]
		}
		h.stalls = append(h.stalls, stall{from: h.lastOK, to: now})
	}
	h.lastOK = now
}

// stalledBetween returns a stall overlapping [from, to], including one still
// going on at to.
func (h *heartbeat) stalledBetween(from, to time.Time) (stall, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.stalls {
		if s.to.After(from) && s.from.Before(to) {
			return s, true
		}
	}
	if to.Sub(h.lastOK) > stallAfter {
		return stall{from: h.lastOK, to: to}, true
	}
	return stall{}, false
}
