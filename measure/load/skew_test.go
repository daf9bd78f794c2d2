package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestSample(t *testing.T) {
	const theta = 3 * time.Second // probe − tool, the ground truth
	tests := []struct {
		name          string
		before, after time.Duration // tool time from s to the probe's read, and from it to r
		wantOffset    time.Duration
		wantUncert    time.Duration
	}{
		{"read in the middle", 5 * time.Millisecond, 5 * time.Millisecond, theta, 5 * time.Millisecond},
		{"read right after s", 0, 10 * time.Millisecond, theta - 5*time.Millisecond, 5 * time.Millisecond},
		{"read right before r", 10 * time.Millisecond, 0, theta + 5*time.Millisecond, 5 * time.Millisecond},
		{"odd round trip rounds the bound up", 0, 3, theta - 1, 2},
		{"zero round trip", 0, 0, theta, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := t0
			read := s.Add(tt.before)
			r := read.Add(tt.after)
			e := sample(s, r, read.Add(theta))
			if e.Offset != tt.wantOffset || e.Uncertainty != tt.wantUncert || e.Samples != 1 {
				t.Errorf("sample = %+v, want offset %v ±%v", e, tt.wantOffset, tt.wantUncert)
			}
			// Wherever the probe read its clock between s and r, the truth
			// lies within the bound.
			if abs(e.Offset-theta) > e.Uncertainty {
				t.Errorf("truth %v outside %v", theta, e)
			}
			if got := e.ToTool(read.Add(theta)); abs(got.Sub(read)) > e.Uncertainty {
				t.Errorf("ToTool = %v, want %v within %v", got, read, e.Uncertainty)
			}
		})
	}
}

func TestBest(t *testing.T) {
	a := Estimate{Offset: 10, Uncertainty: 50, Samples: 3}
	b := Estimate{Offset: 20, Uncertainty: 5, Samples: 2}
	if got, ok := Best(a, Estimate{}, b); !ok || got.Offset != 20 || got.Uncertainty != 5 || got.Samples != 5 {
		t.Errorf("Best(a, zero, b) = %+v, %v; want b's offset with 5 samples", got, ok)
	}
	if _, ok := Best(Estimate{}); ok {
		t.Error("Best(zero) reported an estimate")
	}
}

// TestClockSampleFakeClock drives ClockSample with exchanges of known round
// trips on a fake clock: the shortest one must win, and its offset follows
// from where in the exchange the probe read its clock.
func TestClockSampleFakeClock(t *testing.T) {
	const theta = -700 * time.Millisecond
	fc := clocktesting.NewFakeClock(t0)
	type exchange struct {
		before, after time.Duration
		err           error
	}
	exchanges := []exchange{
		{before: 30 * time.Millisecond, after: 10 * time.Millisecond},
		{err: errors.New("proxy: 503")},
		{before: 2 * time.Millisecond, after: 4 * time.Millisecond}, // shortest: 6 ms
		{before: 9 * time.Millisecond, after: 1 * time.Millisecond},
	}
	i := 0
	get := func(context.Context) (time.Time, error) {
		x := exchanges[i]
		i++
		fc.Step(x.before)
		p := fc.Now().Add(theta)
		fc.Step(x.after)
		return p, x.err
	}
	e, err := ClockSample(context.Background(), fc, get, len(exchanges))
	if err != nil {
		t.Fatal(err)
	}
	want := Estimate{Offset: theta - time.Millisecond, Uncertainty: 3 * time.Millisecond, Samples: 3}
	if e.Offset != want.Offset || e.Uncertainty != want.Uncertainty || e.Samples != want.Samples {
		t.Errorf("ClockSample = %v, want %v", e, want)
	}
	if abs(e.Offset-theta) > e.Uncertainty {
		t.Errorf("truth %v outside %v", theta, e)
	}
}

func TestClockSampleErrors(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	failing := func(context.Context) (time.Time, error) { return time.Time{}, errors.New("pods/proxy forbidden") }
	if _, err := ClockSample(context.Background(), fc, failing, 3); err == nil || !strings.Contains(err.Error(), "pods/proxy forbidden") {
		t.Errorf("all exchanges failing: err = %v, want the cause", err)
	}
	if _, err := ClockSample(context.Background(), fc, failing, 0); err == nil {
		t.Error("n = 0: want an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok := func(context.Context) (time.Time, error) { return fc.Now(), nil }
	if _, err := ClockSample(ctx, fc, ok, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: err = %v, want context.Canceled", err)
	}
}

// TestClockSampleHTTP samples a /clock endpoint shifted by a known offset
// over loopback, as the tool does through the pod proxy. The server reads its
// clock between the two stamps, so the truth lies within the bound.
func TestClockSampleHTTP(t *testing.T) {
	const theta = 1234 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"unix_ns":%d}`, time.Now().Add(theta).UnixNano())
	}))
	defer srv.Close()
	get := func(ctx context.Context) (time.Time, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/clock", nil)
		if err != nil {
			return time.Time{}, err
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			return time.Time{}, err
		}
		defer resp.Body.Close()
		var body struct {
			UnixNS int64 `json:"unix_ns"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return time.Time{}, err
		}
		return time.Unix(0, body.UnixNS), nil
	}
	e, err := ClockSample(context.Background(), clock.RealClock{}, get, 10)
	if err != nil {
		t.Fatal(err)
	}
	if abs(e.Offset-theta) > e.Uncertainty || e.Samples != 10 {
		t.Errorf("ClockSample = %v, want %v within its bound from 10 samples", e, theta)
	}
}
