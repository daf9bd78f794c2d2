package load

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	// Every value maps to a bucket whose midpoint is within half a bucket
	// width: exact below 128 ns, 1/256 relative above.
	vals := []int64{0, 1, 127, 128, 129, 255, 256, 1000, 12345, 999_999, 1 << 40, 1<<62 + 12345}
	for _, v := range vals {
		mid := bucketMid(bucketOf(v))
		if d := mid - v; d < 0 && -d > v/256+1 || d > v/256+1 {
			t.Errorf("value %d: bucket midpoint %d, off by more than 1/256", v, mid)
		}
	}
	for v := int64(1); v < 1<<20; v = v*3/2 + 1 {
		if bucketOf(v) > bucketOf(v+1) {
			t.Fatalf("buckets not monotonic at %d", v)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	if n, q := h.quantiles(0.5); n != 0 || q[0] != 0 {
		t.Errorf("empty histogram: n=%d q=%v, want 0", n, q)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]time.Duration, 10000)
	for i := range vals {
		// Latency-shaped: mostly ~1ms, a tail to ~100ms.
		vals[i] = time.Duration(rng.ExpFloat64() * float64(time.Millisecond))
		if i%100 == 0 {
			vals[i] *= 50
		}
		h.add(vals[i])
	}
	slices.Sort(vals)
	qs := []float64{0.5, 0.9, 0.99, 1}
	n, got := h.quantiles(qs...)
	if n != int64(len(vals)) {
		t.Fatalf("n = %d, want %d", n, len(vals))
	}
	for i, q := range qs {
		// The exact order statistic the histogram estimates; the estimate is
		// its bucket's midpoint, so within half a bucket (1/256) of it.
		exact := vals[int(float64(len(vals))*q+0.999999)-1]
		if d := abs(got[i] - exact); d > exact/256+1 {
			t.Errorf("q%v = %v, exact %v: off by %v, more than half a bucket", q, got[i], exact, d)
		}
	}
}

func TestFailureRing(t *testing.T) {
	f := newFailureRing(4)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	f.add(at(10), KindRefused)
	f.add(at(20), "status_502")
	f.add(at(30), KindRefused)
	if got := f.count(time.Time{}, time.Time{}); got[KindRefused] != 2 || got["status_502"] != 1 || len(got) != 2 {
		t.Errorf("count(all) = %v", got)
	}
	if got := f.count(at(20), at(30)); got["status_502"] != 1 || len(got) != 1 {
		t.Errorf("count([20ms, 30ms)) = %v, want one status_502 (end excluded)", got)
	}
	if !f.keptSince().IsZero() {
		t.Errorf("keptSince = %v before any overwrite, want zero", f.keptSince())
	}
	// The ring holds 10, 20, 30, 40 ms; a late-finishing timeout filed at
	// 15 ms overwrites 10, then 50 overwrites 20. History is complete only
	// after 20 ms, although the 15 ms event is still kept.
	f.add(at(40), KindTimeout)
	f.add(at(15), KindTimeout)
	f.add(at(50), KindReset)
	if want := at(20).Add(1); !f.keptSince().Equal(want) {
		t.Errorf("keptSince = %v, want %v", f.keptSince(), want)
	}
	got := f.count(time.Time{}, time.Time{})
	if got[KindRefused] != 1 || got[KindTimeout] != 2 || got[KindReset] != 1 {
		t.Errorf("count(all) after wrap = %v, want refused 1, timeout 2, reset 1", got)
	}
	// list: the kept events in [15ms, 50ms), in order of instant although
	// the 15 ms one was filed after the 40 ms one.
	list := f.list(at(15), at(50))
	var kinds []string
	for _, e := range list {
		kinds = append(kinds, e.Kind+"@"+e.At.Sub(t0).String())
	}
	if want := "timeout@15ms refused@30ms timeout@40ms"; strings.Join(kinds, " ") != want {
		t.Errorf("list([15ms, 50ms)) = %v, want %s", kinds, want)
	}
}
