package lint

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/epwindow/epwindow/results"
)

// Target is the number workloads are held to: DESIGN.md's
//
//	preStop ≥ PreStop
//	terminationGracePeriodSeconds ≥ preStop + Drain + Headroom
//
// PreStop is whole seconds (the sleep action counts seconds); Grace rounds
// Drain + Headroom up the way results.Recommendation does.
type Target struct {
	PreStop  time.Duration `json:"-"`
	Drain    time.Duration `json:"-"`
	Headroom time.Duration `json:"-"`
	// From says where the number came from: a results file or the flags.
	From string `json:"from"`
}

// FromRecommendation is the number a measure run recommends: its preStop
// and the drain and headroom its grace period was computed with. When the
// run timed the DNS path (measure --dns) and that raised the preStop, From
// says so: a workload held to it is held to its DNS clients' bound.
func FromRecommendation(r *results.Recommendation, from string) Target {
	if r.DNS != nil && r.DNS.Raised {
		from += fmt.Sprintf(", raised for DNS clients: dns_removed + TTL %s", time.Duration(r.DNS.TTLNS))
	}
	return Target{
		PreStop:  r.PreStop(),
		Drain:    time.Duration(r.DrainNS),
		Headroom: time.Duration(r.HeadroomNS),
		From:     from,
	}
}

// Validate checks the number; messages name the flag to change.
func (t Target) Validate() error {
	switch {
	case t.PreStop <= 0:
		return fmt.Errorf("--prestop (%s) must be positive", t.PreStop)
	case t.Drain < 0:
		return fmt.Errorf("--drain (%s) must not be negative", t.Drain)
	case t.Headroom < 0:
		return fmt.Errorf("--headroom (%s) must not be negative", t.Headroom)
	case t.PreStop > 24*time.Hour || t.Drain > 24*time.Hour || t.Headroom > 24*time.Hour:
		return errors.New("--prestop, --drain and --headroom must each be under 24h")
	}
	return nil
}

// PreStopSeconds is the preStop the window needs, in whole seconds.
func (t Target) PreStopSeconds() int64 { return ceilSeconds(t.PreStop) }

// TailSeconds is what the grace period adds after the preStop: drain +
// headroom, rounded up.
func (t Target) TailSeconds() int64 { return ceilSeconds(t.Drain + t.Headroom) }

// GraceSeconds is the least terminationGracePeriodSeconds for a pod whose
// termination delay (preStop + in-app delay) is cover: the kubelet counts
// the preStop hook inside the grace period
// (pkg/kubelet/kuberuntime/kuberuntime_container.go, killContainer:
// gracePeriod -= the hook's time), so the app's drain starts only after it.
func (t Target) GraceSeconds(cover time.Duration) int64 {
	return max(ceilSeconds(cover), t.PreStopSeconds()) + t.TailSeconds()
}

// String renders the number as the flags that give it.
func (t Target) String() string {
	return fmt.Sprintf("--prestop %ds --drain %s --headroom %s", t.PreStopSeconds(), t.Drain, t.Headroom)
}

// ceilSeconds rounds up in integers, as the policy's CEL does: float
// seconds lose the nanoseconds of durations past 2^53 ns (104 days).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// satAdd is a + b for a, b ≥ 0, at most math.MaxInt64 where Go would wrap
// (the policy's CEL saturates the same way rather than fail on overflow).
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
