package load

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	grpcbackoff "google.golang.org/grpc/backoff"
)

// Reconnect policies (--reconnect).
const (
	// ReconnectGRPCDefault is grpc-go's connection backoff with its default
	// configuration (google.golang.org/grpc/backoff DefaultConfig: base 1 s,
	// × 1.6 per failure, jitter ±0.2, at most 120 s).
	ReconnectGRPCDefault = "grpc-default"
	// ReconnectImmediate reconnects at once, every time: the worst herd.
	ReconnectImmediate = "immediate"
)

// Reconnect is how a stream client waits before each attempt to re-open a
// stream that ended (--reconnect grpc-default | immediate | DUR±JITTER).
type Reconnect struct {
	// Policy is ReconnectGRPCDefault, ReconnectImmediate or "fixed".
	Policy string
	// Delay and Jitter are DUR±JITTER's: each wait is uniform in
	// [Delay−Jitter, Delay+Jitter].
	Delay, Jitter time.Duration
}

// String renders r as --reconnect takes it.
func (r Reconnect) String() string {
	if r.Policy == "fixed" {
		return r.Delay.String() + "±" + r.Jitter.String()
	}
	if r.Policy == "" {
		return ReconnectGRPCDefault
	}
	return r.Policy
}

// ParseReconnect parses grpc-default, immediate or DUR±JITTER (also
// DUR+-JITTER, DUR alone means no jitter).
func ParseReconnect(s string) (Reconnect, error) {
	switch s {
	case ReconnectGRPCDefault, ReconnectImmediate:
		return Reconnect{Policy: s}, nil
	}
	d, j, ok := strings.Cut(s, "±")
	if !ok {
		d, j, ok = strings.Cut(s, "+-")
	}
	bad := fmt.Errorf("--reconnect %q: want grpc-default, immediate or DUR±JITTER (e.g. 500ms±200ms)", s)
	delay, err := time.ParseDuration(d)
	if err != nil || delay < 0 {
		return Reconnect{}, bad
	}
	var jitter time.Duration
	if ok {
		if jitter, err = time.ParseDuration(j); err != nil || jitter < 0 {
			return Reconnect{}, bad
		}
	}
	if jitter > delay {
		return Reconnect{}, fmt.Errorf("--reconnect %q: the jitter must not exceed the delay (waits are never negative)", s)
	}
	return Reconnect{Policy: "fixed", Delay: delay, Jitter: jitter}, nil
}

// Wait is how long to wait before the attempt that follows failures failed
// attempts since the stream last ended (0: the first attempt). u is uniform
// in [0, 1) (rand.Float64 outside tests).
//
// grpc-default follows grpc-go's addrConn.resetTransportAndUnlock
// (clientconn.go): the first attempt after a working connection is
// immediate; after the k-th failure in a row it waits
// Backoff(k−1) of internal/backoff/backoff.go (Exponential.Backoff):
// BaseDelay exactly for k = 1, then min(BaseDelay × 1.6^(k−1), MaxDelay)
// × (1 + Jitter × (2u − 1)).
func (r Reconnect) Wait(failures int, u float64) time.Duration {
	switch r.Policy {
	case ReconnectImmediate:
		return 0
	case "fixed":
		return r.Delay + time.Duration(float64(r.Jitter)*(2*u-1))
	}
	if failures == 0 {
		return 0
	}
	bc := grpcbackoff.DefaultConfig
	retries := failures - 1
	if retries == 0 {
		return bc.BaseDelay
	}
	backoff, limit := float64(bc.BaseDelay), float64(bc.MaxDelay)
	for backoff < limit && retries > 0 {
		backoff *= bc.Multiplier
		retries--
	}
	backoff = min(backoff, limit)
	backoff *= 1 + bc.Jitter*(2*u-1)
	return time.Duration(max(backoff, 0))
}

// uniform is the u that Wait takes, outside tests.
func uniform() float64 { return rand.Float64() }
