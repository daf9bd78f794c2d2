package load

import (
	"math"
	"testing"
	"time"
)

func TestConstantPacerPace(t *testing.T) {
	tests := []struct {
		name     string
		rate     float64
		elapsed  time.Duration
		hits     uint64
		wantWait time.Duration
		wantStop bool
	}{
		{"first hit goes at once", 100, 0, 0, 0, false},
		{"second hit one interval later", 100, 0, 1, 10 * time.Millisecond, false},
		{"part of the interval already gone", 100, 4 * time.Millisecond, 1, 6 * time.Millisecond, false},
		{"exactly on time", 100, 10 * time.Millisecond, 1, 0, false},
		{"behind schedule: no wait", 100, 95 * time.Millisecond, 3, 0, false},
		{"ahead of schedule after a burst", 100, 20 * time.Millisecond, 5, 30 * time.Millisecond, false},
		{"fractional rate", 0.5, time.Second, 1, time.Second, false},
		{"non-integer interval", 3, 0, 1, 333333333, false},
		{"high rate", 1e6, 0, 1, time.Microsecond, false},
		{"zero rate stops", 0, 0, 0, 0, true},
		{"negative rate stops", -1, 0, 0, 0, true},
		{"NaN rate stops", math.NaN(), 0, 0, 0, true},
		{"infinite rate stops", math.Inf(1), 0, 0, 0, true},
		{"schedule overflow stops", 1e-9, 0, 1 << 40, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, stop := ConstantPacer{Rate: tt.rate}.Pace(tt.elapsed, tt.hits)
			if wait != tt.wantWait || stop != tt.wantStop {
				t.Errorf("Pace(%v, %d) at %v/s = (%v, %v), want (%v, %v)",
					tt.elapsed, tt.hits, tt.rate, wait, stop, tt.wantWait, tt.wantStop)
			}
		})
	}
}

func TestConstantPacerDue(t *testing.T) {
	p := ConstantPacer{Rate: 250}
	for hits := uint64(0); hits < 1000; hits++ {
		due, ok := p.Due(hits)
		want := time.Duration(hits) * 4 * time.Millisecond
		if !ok || due != want {
			t.Fatalf("Due(%d) = (%v, %v), want (%v, true)", hits, due, ok, want)
		}
	}
}
