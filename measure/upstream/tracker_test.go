package upstream

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// stubObserver is only named; tests feed its snapshots through Tracker.Add.
type stubObserver struct{ noneObserver }

func (stubObserver) Name() string              { return "stub" }
func (stubObserver) Resolution() time.Duration { return time.Second }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// at is a poll n intervals after t0 that took 10 ms.
func at(n int) (time.Time, time.Time) {
	s := t0.Add(time.Duration(n) * time.Second)
	return s, s.Add(10 * time.Millisecond)
}

// snap builds one poll: replica name → listed addresses, or an error.
func snap(n int, reps map[string]any) Snapshot {
	s, a := at(n)
	out := Snapshot{Sent: s, At: a}
	for name, v := range reps {
		r := ReplicaUpstreams{Replica: name, Sent: s, At: a}
		switch v := v.(type) {
		case error:
			r.Err = v
		case []netip.AddrPort:
			r.Upstreams = v
		}
		out.Replicas = append(out.Replicas, r)
	}
	return out
}

func TestTrackerRemovals(t *testing.T) {
	gone := netip.MustParseAddrPort("10.244.0.5:8080")
	stay := netip.MustParseAddrPort("10.244.0.6:8080")
	both := aps("10.244.0.5:8080", "10.244.0.6:8080")
	one := aps("10.244.0.6:8080")
	blind := errors.New("connection refused")
	type want struct {
		replica       string
		last, removed int // poll numbers; -1 = none
		blind         int
		invalid       string // substring; "" = valid
	}
	for _, tc := range []struct {
		name  string
		polls []map[string]any
		query netip.AddrPort
		want  []want
	}{
		{
			name:  "removed at the third poll",
			polls: []map[string]any{{"a": both}, {"a": both}, {"a": one}, {"a": one}},
			query: gone,
			want:  []want{{"a", 1, 2, 0, ""}},
		},
		{
			name:  "two replicas remove at different polls",
			polls: []map[string]any{{"a": both, "b": both}, {"a": one, "b": both}, {"a": one, "b": both}, {"a": one, "b": one}},
			query: gone,
			want:  []want{{"a", 0, 1, 0, ""}, {"b", 2, 3, 0, ""}},
		},
		{
			name:  "a blind poll is not a removal",
			polls: []map[string]any{{"a": both}, {"a": blind}, {"a": blind}},
			query: gone,
			want:  []want{{"a", 0, -1, 2, "unreadable after last listing"}},
		},
		{
			name:  "blind polls inside the bracket invalidate it",
			polls: []map[string]any{{"a": both}, {"a": blind}, {"a": one}},
			query: gone,
			want:  []want{{"a", 0, 2, 1, "unreadable at 1 poll"}},
		},
		{
			name:  "a replica missing from a poll is blind there",
			polls: []map[string]any{{"a": both, "b": both}, {"a": both}, {"a": one, "b": one}},
			query: gone,
			want:  []want{{"a", 1, 2, 0, ""}, {"b", 0, 2, 1, "unreadable"}},
		},
		{
			name:  "listed again after a removal: the last removal counts",
			polls: []map[string]any{{"a": both}, {"a": one}, {"a": both}, {"a": one}},
			query: gone,
			want:  []want{{"a", 2, 3, 0, ""}},
		},
		{
			name:  "still listed",
			polls: []map[string]any{{"a": both}, {"a": both}},
			query: stay,
			want:  []want{{"a", 1, -1, 0, "still listed"}},
		},
		{
			name:  "port 0 query matches any port; removed when the last port goes",
			polls: []map[string]any{{"a": aps("10.244.0.5:80", "10.244.0.5:443")}, {"a": aps("10.244.0.5:443")}, {"a": aps()}},
			query: netip.MustParseAddrPort("10.244.0.5:0"),
			want:  []want{{"a", 1, 2, 0, ""}},
		},
		{
			name:  "never listed",
			polls: []map[string]any{{"a": one}},
			query: gone,
			want:  nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(stubObserver{}, nil, 0)
			for i, p := range tc.polls {
				tr.Add(snap(i, p), nil)
			}
			got := tr.Removals(tc.query)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d removals %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Replica != w.replica || g.Key() != "stub/"+w.replica {
					t.Errorf("replica %q key %q, want %q", g.Replica, g.Key(), w.replica)
				}
				ls, la := at(w.last)
				if g.LastPresent != (Reading{ls, la}) {
					t.Errorf("%s: last present %v, want poll %d", w.replica, g.LastPresent, w.last)
				}
				if w.removed < 0 {
					if g.Done() {
						t.Errorf("%s: removed at %v, want not removed", w.replica, g.Removed)
					}
				} else {
					rs, ra := at(w.removed)
					if g.Removed != (Reading{rs, ra}) {
						t.Errorf("%s: removed %v, want poll %d", w.replica, g.Removed, w.removed)
					}
					if from, to := g.Bracket(); from != ls || to != ra {
						t.Errorf("%s: bracket %v..%v", w.replica, from, to)
					}
				}
				if g.Blind != w.blind {
					t.Errorf("%s: blind %d, want %d", w.replica, g.Blind, w.blind)
				}
				inv := g.Invalid()
				if (w.invalid == "") != (inv == "") || !strings.Contains(inv, w.invalid) {
					t.Errorf("%s: Invalid() = %q, want %q", w.replica, inv, w.invalid)
				}
			}
		})
	}
}

func TestTrackerAppearances(t *testing.T) {
	late := netip.MustParseAddrPort("10.244.0.9:8080")
	old := aps("10.244.0.6:8080")
	both := aps("10.244.0.6:8080", "10.244.0.9:8080")
	blind := errors.New("connection refused")
	type want struct {
		replica     string
		absent      int // poll number; -1 = none (not bounded)
		firstListed int
	}
	for _, tc := range []struct {
		name  string
		polls []map[string]any
		query netip.AddrPort
		want  []want
	}{
		{
			name:  "listed from the third poll",
			polls: []map[string]any{{"a": old}, {"a": old}, {"a": both}, {"a": both}},
			query: late,
			want:  []want{{"a", 1, 2}},
		},
		{
			name:  "two replicas list it at different polls",
			polls: []map[string]any{{"a": old, "b": old}, {"a": both, "b": old}, {"a": both, "b": both}},
			query: late,
			want:  []want{{"a", 0, 1}, {"b", 1, 2}},
		},
		{
			name:  "unreadable polls widen the bracket back to the last readable one",
			polls: []map[string]any{{"a": old}, {"a": blind}, {"a": blind}, {"a": both}},
			query: late,
			want:  []want{{"a", 0, 3}},
		},
		{
			name:  "listed at the replica's first reading: not bounded",
			polls: []map[string]any{{"a": both}, {"a": both}},
			query: late,
			want:  []want{{"a", -1, 0}},
		},
		{
			name:  "a re-listing after a removal keeps the first arrival",
			polls: []map[string]any{{"a": old}, {"a": both}, {"a": old}, {"a": both}},
			query: late,
			want:  []want{{"a", 0, 1}},
		},
		{
			name:  "never listed",
			polls: []map[string]any{{"a": old}},
			query: late,
			want:  nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(stubObserver{}, nil, 0)
			for i, p := range tc.polls {
				tr.Add(snap(i, p), nil)
			}
			got := tr.Appearances(tc.query)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d appearances %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				// Every poll took 10 ms (at): the resolution is the
				// interval plus that poll time.
				if g.Replica != w.replica || g.Key() != "stub/"+w.replica || g.Resolution != time.Second+10*time.Millisecond {
					t.Errorf("replica %q key %q resolution %s, want %q, 1.01s", g.Replica, g.Key(), g.Resolution, w.replica)
				}
				fs, fa := at(w.firstListed)
				if g.FirstPresent != (Reading{fs, fa}) {
					t.Errorf("%s: first present %v, want poll %d", w.replica, g.FirstPresent, w.firstListed)
				}
				if w.absent < 0 {
					if g.Bounded() {
						t.Errorf("%s: bounded by %v, want not bounded", w.replica, g.LastAbsent)
					}
					continue
				}
				as, aa := at(w.absent)
				if !g.Bounded() || g.LastAbsent != (Reading{as, aa}) {
					t.Errorf("%s: last absent %v, want poll %d", w.replica, g.LastAbsent, w.absent)
				}
				if from, to := g.Bracket(); from != as || to != fa {
					t.Errorf("%s: bracket %v..%v, want %v..%v", w.replica, from, to, as, fa)
				}
			}
		})
	}
}

func TestTrackerObserverWideErrorIsBlind(t *testing.T) {
	tr := NewTracker(stubObserver{}, nil, 0)
	tr.Add(snap(0, map[string]any{"a": aps("10.244.0.5:8080")}), nil)
	s, a := at(1)
	tr.Add(Snapshot{Sent: s, At: a}, errors.New("list controller pods: forbidden"))
	r := tr.Removals(netip.MustParseAddrPort("10.244.0.5:8080"))
	if len(r) != 1 || r[0].Done() || r[0].Blind != 1 || !strings.Contains(r[0].Invalid(), "forbidden") {
		t.Fatalf("got %+v, want one blind, not removed, naming the error", r)
	}
	if ok, why := tr.Gone(netip.MustParseAddrPort("10.244.0.5:8080")); ok || !strings.Contains(why, "forbidden") {
		t.Errorf("Gone during a blind poll = %v %q", ok, why)
	}
}

func TestTrackerSteadyAndGone(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.244.0.5:8080"), netip.MustParseAddrPort("10.244.0.6:8080")
	tr := NewTracker(stubObserver{}, nil, 0)
	if ok, why := tr.Steady([]netip.AddrPort{a}); ok || !strings.Contains(why, "no poll yet") {
		t.Errorf("before any poll: %v %q", ok, why)
	}
	tr.Add(snap(0, map[string]any{"r1": aps("10.244.0.5:8080", "10.244.0.6:8080"), "r2": aps("10.244.0.5:8080")}), nil)
	if ok, why := tr.Steady([]netip.AddrPort{a, b}); ok || !strings.Contains(why, "r2 does not list 10.244.0.6:8080") {
		t.Errorf("r2 lacks b: %v %q", ok, why)
	}
	if ok, _ := tr.Steady([]netip.AddrPort{a}); !ok {
		t.Error("both list a: want steady")
	}
	if ok, why := tr.Gone(b); ok || !strings.Contains(why, "r1 still lists") {
		t.Errorf("Gone(b) = %v %q", ok, why)
	}
	tr.Add(snap(1, map[string]any{"r1": aps("10.244.0.5:8080"), "r2": errors.New("timeout")}), nil)
	if ok, why := tr.Steady([]netip.AddrPort{a}); ok || !strings.Contains(why, "timeout") {
		t.Errorf("blind r2: %v %q", ok, why)
	}
	tr.Add(snap(2, map[string]any{"r1": aps("10.244.0.5:8080"), "r2": aps("10.244.0.5:8080")}), nil)
	if ok, why := tr.Gone(b); !ok {
		t.Errorf("Gone(b) after both dropped it: %q", why)
	}
	tr.Forget(b)
	if r := tr.Removals(b); len(r) != 0 {
		t.Errorf("after Forget: %+v", r)
	}
}

func TestTrackerWaitFor(t *testing.T) {
	tr := NewTracker(stubObserver{}, nil, 0)
	a := netip.MustParseAddrPort("10.244.0.5:8080")
	done := make(chan error, 1)
	go func() {
		done <- tr.WaitFor(context.Background(), func() bool { ok, _ := tr.Steady([]netip.AddrPort{a}); return ok })
	}()
	tr.Add(snap(0, map[string]any{"r": aps()}), nil)
	tr.Add(snap(1, map[string]any{"r": aps("10.244.0.5:8080")}), nil)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitFor did not return after the address was listed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.WaitFor(ctx, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled WaitFor: %v", err)
	}
}

// With no observer (--observer none, or --observer dns) the tracker never
// polls, and must not hold the run in "no poll yet" forever: it is steady.
func TestTrackerSteadyWithoutObserver(t *testing.T) {
	tr := NewTracker(noneObserver{}, nil, 0)
	if ok, why := tr.Steady([]netip.AddrPort{netip.MustParseAddrPort("10.244.0.5:8080")}); !ok {
		t.Errorf("Steady with no observer = false (%s), want true", why)
	}
}
