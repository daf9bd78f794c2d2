package measure

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestHeartbeatStalls(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	h := newHeartbeat(fake.NewClientset(), clk)
	for ms := 250; ms <= 1000; ms += 250 {
		h.ok(at(ms))
	}
	if _, ok := h.stalledBetween(at(0), at(1000)); ok {
		t.Fatal("stall reported while the API server answered every 250ms")
	}
	// 15 s without an answer, then answers again.
	h.ok(at(16000))
	h.ok(at(16250))
	s, ok := h.stalledBetween(at(5000), at(6000))
	if !ok || s.from != at(1000) || s.to != at(16000) {
		t.Fatalf("stalledBetween = %+v, %v; want the 1s–16s outage", s, ok)
	}
	if _, ok := h.stalledBetween(at(16100), at(20000)); ok {
		// lastOK is 16.25 s: a window ending at 20 s is 3.75 s of silence.
		t.Log("a window ending 3.75 s after the last answer counts as stalled, as it should")
	} else {
		t.Fatal("an ongoing silence of 3.75 s at the window's end was not reported")
	}
	if _, ok := h.stalledBetween(at(16100), at(17000)); ok {
		t.Fatal("stall reported after the API server came back")
	}
}
