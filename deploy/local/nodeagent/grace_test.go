package nodeagent

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestPodGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		name       string
		deletion   *int64
		terminated *int64
		want       int64
	}{
		{"deletion wins", ptr.To(int64(5)), ptr.To(int64(30)), 5},
		{"force delete", ptr.To(int64(0)), ptr.To(int64(30)), 0},
		{"spec when not deleted", nil, ptr.To(int64(30)), 30},
		{"minimum without either", nil, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{}
			p.DeletionGracePeriodSeconds = tc.deletion
			p.Spec.TerminationGracePeriodSeconds = tc.terminated
			if got := podGracePeriod(p); got != tc.want {
				t.Fatalf("podGracePeriod = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStopTimeout(t *testing.T) {
	for _, tc := range []struct {
		name          string
		grace         int64
		hook, waiting time.Duration
		want          time.Duration
	}{
		{"no hook: whole grace", 30, 0, 0, 30 * time.Second},
		{"hook time is subtracted", 30, 10 * time.Second, 0, 20 * time.Second},
		// executePreStopHook returns whole seconds: 10.9 s counts as 10.
		{"hook seconds truncate", 30, 10900 * time.Millisecond, 0, 20 * time.Second},
		{"hook used it all: minimum", 30, 30 * time.Second, 0, 2 * time.Second},
		{"hook overran: minimum", 5, 9 * time.Second, 0, 2 * time.Second},
		{"zero grace: minimum", 0, 0, 0, 2 * time.Second},
		{"hook time ignored when grace is 0", 0, 5 * time.Second, 0, 2 * time.Second},
		// A sidecar's wait for its turn comes off what the hook left,
		// truncated too (waitForTurn's float seconds through int64).
		{"turn wait is subtracted", 30, 10900 * time.Millisecond, 5900 * time.Millisecond, 15 * time.Second},
		{"turn wait used the rest: minimum", 10, 4 * time.Second, 6 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stopTimeout(tc.grace, tc.hook, tc.waiting); got != tc.want {
				t.Fatalf("stopTimeout(%d, %s, %s) = %s, want %s", tc.grace, tc.hook, tc.waiting, got, tc.want)
			}
		})
	}
}

// A sidecar's SIGTERM waits for every running regular container and for
// the sidecar declared next, if that one runs: a stopped sidecar breaks
// the chain, as in kuberuntime_termination_order.go.
func TestTerminationTurns(t *testing.T) {
	ctr := func(name string, init, sidecar, running bool) *container {
		c := &container{spec: v1.Container{Name: name}, init: init, sidecar: sidecar}
		if running {
			c.proc = &proc{done: make(chan struct{})}
		}
		return c
	}
	cs := []*container{
		ctr("init", true, false, false),
		ctr("a", true, true, true),
		ctr("b", true, true, false),
		ctr("c", true, true, true),
		ctr("d", true, true, true),
		ctr("app", false, false, true),
		ctr("job", false, false, false),
	}
	want := map[string][]string{"a": {"app"}, "c": {"app", "d"}, "d": {"app"}}
	got := terminationTurns(cs)
	for i, c := range cs {
		var names []string
		for _, ch := range got[i] {
			for _, o := range cs {
				if o.proc != nil && (<-chan struct{})(o.proc.done) == ch {
					names = append(names, o.spec.Name)
				}
			}
		}
		if !slices.Equal(names, want[c.spec.Name]) {
			t.Errorf("%s waits for %v, want %v", c.spec.Name, names, want[c.spec.Name])
		}
	}
}

func TestRestartDelay(t *testing.T) {
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for n, w := range want {
		if got := restartDelay(n); got != w {
			t.Errorf("restartDelay(%d) = %s, want %s", n, got, w)
		}
	}
}

func TestShouldRestart(t *testing.T) {
	for _, tc := range []struct {
		policy v1.RestartPolicy
		code   int32
		want   bool
	}{
		{v1.RestartPolicyAlways, 0, true},
		{v1.RestartPolicyAlways, 1, true},
		{v1.RestartPolicyOnFailure, 0, false},
		{v1.RestartPolicyOnFailure, 137, true},
		{v1.RestartPolicyNever, 1, false},
	} {
		if got := shouldRestart(tc.policy, tc.code); got != tc.want {
			t.Errorf("shouldRestart(%s, %d) = %v, want %v", tc.policy, tc.code, got, tc.want)
		}
	}
}

func TestProbeStateThresholds(t *testing.T) {
	p := probeParams{SuccessThreshold: 2, FailureThreshold: 3}
	var s probeState
	steps := []struct {
		ok   bool
		want bool
	}{
		{true, false}, // one success of two needed
		{true, true},
		{false, true}, // failures 1, 2 of 3
		{false, true},
		{true, true}, // a success resets the failure run
		{false, true},
		{false, true},
		{false, false},
		{true, false},
		{true, true},
	}
	for i, st := range steps {
		if got := s.observe(st.ok, p); got != st.want {
			t.Fatalf("step %d (ok=%v): ready %v, want %v", i, st.ok, got, st.want)
		}
	}
}
