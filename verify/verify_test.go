package verify

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	junit "github.com/joshdk/go-junit"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var t0 = time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestAttribute(t *testing.T) {
	const res, lag = 100 * time.Millisecond, 3 * time.Second
	// A rolling update, maxSurge 1: new-1 Ready at 1000 ms, old-1 deleted at
	// 1010 ms, new-2 Ready at 2000 ms, old-2 deleted at 2010 ms.
	timing := []podTimes{
		{Name: "new-1", Ready: at(1000)}, {Name: "old-1", Deleted: at(1010), LeftSlices: at(1020)},
		{Name: "new-2", Ready: at(2000)}, {Name: "old-2", Deleted: at(2010), LeftSlices: at(2020)},
	}
	// The same with the ports read: old-1 refused from 1015 ms (it exits at
	// SIGTERM); new-2 answered only from 4000 ms (a slow listener); old-2
	// kept answering (a preStop), new-1 answered at once.
	checked := []podTimes{
		{Name: "new-1", Ready: at(1000), Checked: true, FirstAnswer: at(1001)},
		{Name: "old-1", Deleted: at(1010), LeftSlices: at(1020), Checked: true, FirstAnswer: at(0), FirstRefusal: at(1015)},
		{Name: "new-2", Ready: at(2000), Checked: true, FirstAnswer: at(4000)},
		{Name: "old-2", Deleted: at(2010), LeftSlices: at(2020), Checked: true, FirstAnswer: at(0)},
	}
	for _, tc := range []struct {
		name  string
		pods  []podTimes
		at    time.Time
		side  string
		pod   string
		since time.Duration
		basis string
	}{
		{"before any event", timing, at(500), SideUnknown, "", 0, BasisTiming},
		{"timing: after a deletion", timing, at(1500), SideShutdown, "old-1", 490 * time.Millisecond, BasisTiming},
		{"timing: latest event wins", timing, at(2005), SideStartup, "new-2", 5 * time.Millisecond, BasisTiming},
		{"listener: the refusing old pod", checked, at(1500), SideShutdown, "old-1", 490 * time.Millisecond, BasisListener},
		// A poll interval before the first refusal is inside its hazard.
		{"listener: within one poll of the refusal", checked, at(1016 - 100), SideShutdown, "old-1", -94 * time.Millisecond, BasisListener},
		// 2500 ms: old-1 may still be routed (left 1020 + lag 3 s), but new-2
		// is Ready and not answering: a certain hazard beats a possible one.
		{"listener: certain hazard wins", checked, at(2500), SideStartup, "new-2", 500 * time.Millisecond, BasisListener},
		// old-3 refuses at 5000 ms while still ready in the slices (left at
		// 5500): certain, and later than new-3's startup hazard.
		{"listener: later certain hazard wins", append(checked,
			podTimes{Name: "new-3", Ready: at(4800), Checked: true},
			podTimes{Name: "old-3", Deleted: at(4900), LeftSlices: at(5500), Checked: true, FirstRefusal: at(5000)}),
			at(5200), SideShutdown, "old-3", 300 * time.Millisecond, BasisListener},
		// 4500 ms: new-2 answers, old-1's lag has passed: no hazard; the
		// latest event before is old-2's deletion.
		{"listener: no hazard falls back to timing", checked, at(4500), SideShutdown, "old-2", 2490 * time.Millisecond, BasisTiming},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := attribute(tc.at, tc.pods, res, lag)
			want := attribution{tc.side, tc.pod, tc.since, tc.basis}
			if got != want {
				t.Errorf("attribute(%s) = %+v, want %+v", tc.at.Sub(t0), got, want)
			}
		})
	}
}

func TestShapeAndBlindCause(t *testing.T) {
	// 10 req/s over 4 replicas, a 1 s window: 2.5 requests per termination,
	// under 3; at least 12 req/s would do.
	s := shapeFor(time.Second, "self-test", 10, 4)
	if s.PerTermination != 2.5 || !strings.Contains(s.Warning, "may miss the window") || !strings.Contains(s.Warning, "--rate 12") {
		t.Errorf("shape = %+v", s)
	}
	if s := shapeFor(time.Second, "x", 2, 4); !strings.Contains(s.Warning, "cannot see the window") {
		t.Errorf("0.5 per termination: warning %q", s.Warning)
	}
	if s := shapeFor(3*time.Second, "x", 100, 3); s.Warning != "" || s.PerTermination != 100 {
		t.Errorf("100 per termination: %+v", s)
	}
	if shapeFor(0, "", 10, 2) != nil {
		t.Error("an unknown window gives a shape")
	}
	for _, tc := range []struct {
		method string
		shape  *Shape
		want   string
	}{
		{"GET", nil, "--method POST"},
		{"GET", shapeFor(time.Second, "x", 1, 2), "rate is low"},
		{"POST", shapeFor(time.Second, "x", 1, 2), "rate is too low"},
		{"POST", nil, "raise --rate"},
	} {
		if got := blindCause(tc.method, tc.shape); !strings.Contains(got, tc.want) {
			t.Errorf("blindCause(%s, %v) = %q, want it to say %q", tc.method, tc.shape, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	clean := Rollout{N: 1, Complete: true, Outcomes: Outcomes{OK: 100}, Exits: []PodExit{{Pod: "a", Container: "app", ExitCode: 0, Reason: "Completed"}}}
	failed := Rollout{N: 2, Complete: true, Outcomes: Outcomes{OK: 90, Failed: map[string]int{"status_502": 2}}}
	killed := Rollout{N: 3, Complete: true, Outcomes: Outcomes{OK: 90}, Exits: []PodExit{{Pod: "b", Container: "app", ExitCode: 137, Reason: "Error"}}}
	oom := Rollout{N: 4, Complete: true, Outcomes: Outcomes{OK: 90}, Exits: []PodExit{{Pod: "c", Container: "app", ExitCode: 1, Reason: "OOMKilled"}}}
	stuck := Rollout{N: 5, Condition: "ProgressDeadlineExceeded: no progress"}
	for _, tc := range []struct {
		name      string
		rep       Report
		requested int
		pass      bool
		reason    string
	}{
		{"clean", Report{Rollouts: []Rollout{clean}}, 1, true, ""},
		{"failures over the limit", Report{Rollouts: []Rollout{clean, failed}}, 2, false, "2 failed requests"},
		{"failures within --max-failures", Report{Rollouts: []Rollout{clean, failed}, MaxFailures: 2}, 2, true, ""},
		{"SIGKILL", Report{Rollouts: []Rollout{killed}}, 1, false, "137 (Error, SIGKILL)"},
		{"OOMKilled", Report{Rollouts: []Rollout{oom}}, 1, false, "OOMKilled"},
		{"not complete", Report{Rollouts: []Rollout{stuck}}, 1, false, "ProgressDeadlineExceeded"},
		{"fewer rollouts", Report{Rollouts: []Rollout{clean}}, 3, false, "1 of 3 rollouts ran"},
		{"dirty baseline", Report{Rollouts: []Rollout{clean}, Baseline: &Outcomes{OK: 5, Failed: map[string]int{"refused": 1}}}, 1, false, "before any rollout"},
		{"interrupted", Report{Rollouts: []Rollout{clean}, Interrupted: true}, 3, false, "interrupted"},
		{"blind", Report{SelfTest: &SelfTest{Blind: true, Cause: "retries"}}, 3, false, "blind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := decide(&tc.rep, tc.requested)
			if v.Pass != tc.pass {
				t.Errorf("pass = %v, want %v (reasons %q)", v.Pass, tc.pass, v.Reasons)
			}
			if tc.reason != "" && !strings.Contains(strings.Join(v.Reasons, "\n"), tc.reason) {
				t.Errorf("reasons %q do not mention %q", v.Reasons, tc.reason)
			}
			if v.Blind != (tc.name == "blind") {
				t.Errorf("blind = %v", v.Blind)
			}
		})
	}
}

func TestParseCheckPort(t *testing.T) {
	for in, want := range map[string]string{"8080": "8080/", "8080/healthz": "8080/healthz", "1/a/b": "1/a/b"} {
		cp, err := ParseCheckPort(in)
		if err != nil || cp.String() != want {
			t.Errorf("ParseCheckPort(%q) = %v, %v; want %s", in, cp, err, want)
		}
	}
	for _, bad := range []string{"", "x", "0", "70000", "/healthz"} {
		if _, err := ParseCheckPort(bad); err == nil || !strings.Contains(err.Error(), "--check-port") {
			t.Errorf("ParseCheckPort(%q) = %v, want an error naming --check-port", bad, err)
		}
	}
}

func TestRestartPatchAndComplete(t *testing.T) {
	var p map[string]any
	if err := json.Unmarshal(restartPatch(t0), &p); err != nil {
		t.Fatal(err)
	}
	// The only change: the template annotation kubectl rollout restart sets.
	want := `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-12-01T06:00:00Z"}}}}}`
	if got, _ := json.Marshal(p); string(got) != want {
		t.Errorf("patch = %s, want %s", got, want)
	}
	three := int32(3)
	d := func(gen, observed int64, updated, total, available int32, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: &three},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, UpdatedReplicas: updated, Replicas: total, AvailableReplicas: available, Conditions: conds}}
	}
	for _, tc := range []struct {
		name   string
		d      *appsv1.Deployment
		done   bool
		failed string
	}{
		{"complete", d(2, 2, 3, 3, 3), true, ""},
		{"not observed", d(3, 2, 3, 3, 3), false, ""},
		{"old pod left", d(2, 2, 3, 4, 3), false, ""},
		{"not available", d(2, 2, 3, 3, 2), false, ""},
		// The condition of the last rollout is read only once the
		// controller saw the restart (kubectl rollout status).
		{"deadline of the last generation", d(3, 2, 1, 4, 3, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded", Message: "stuck"}), false, ""},
		{"deadline", d(2, 2, 1, 4, 3, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded", Message: "stuck"}), false, "ProgressDeadlineExceeded: stuck"},
	} {
		done, failed := rolloutComplete(tc.d)
		if done != tc.done || failed != tc.failed {
			t.Errorf("%s: rolloutComplete = %v, %q; want %v, %q", tc.name, done, failed, tc.done, tc.failed)
		}
	}
}

func TestPortCheck(t *testing.T) {
	ns := func(ms int) *int64 { v := int64(ms) * 1e6; return &v }
	good := PortCheck{Pod: "good", Seen: true, LeftSlicesNS: 10e6, LastAnswerNS: ns(5100)}
	bad := PortCheck{Pod: "bad", Seen: true, LeftSlicesNS: 10e6, LastAnswerNS: nil, RefusedNS: ns(3)}
	if !good.Ordered() || !strings.Contains(good.String(), "answered 5.09s after leaving") {
		t.Errorf("good: ordered %v, %s", good.Ordered(), good)
	}
	if bad.Ordered() || !strings.Contains(bad.String(), "7ms before leaving the EndpointSlices") {
		t.Errorf("bad: ordered %v, %s", bad.Ordered(), bad)
	}
}

// sample is a report with every part, for the renderers' golden files.
func sample() *Report {
	ns := func(ms int) *int64 { v := int64(ms) * 1e6; return &v }
	r := &Report{Namespace: "shop", Deployment: "checkout", URL: "http://10.0.0.10/", Host: "checkout.example.com",
		Method: "POST", Rate: 200, Replicas: 3,
		SelfTest: &SelfTest{Namespace: "epwindow-verify-abc123", Replicas: 3, Terminations: 3, WindowNS: int64(2900 * time.Millisecond),
			Outcomes: Outcomes{OK: 2400, Failed: map[string]int{"status_502": 41}}},
		Shape:    &Shape{WindowNS: int64(2900 * time.Millisecond), Source: "self-test", Rate: 200, Replicas: 3, PerTermination: 193.3},
		Baseline: &Outcomes{OK: 600},
		Rollouts: []Rollout{
			{N: 1, Started: t0, DurationNS: int64(9200 * time.Millisecond), DrainedNS: int64(12 * time.Second), Complete: true,
				Outcomes: Outcomes{OK: 2500}, Exits: []PodExit{{Pod: "checkout-1", Container: "app", ExitCode: 0, Reason: "Completed"}},
				Ports:   []PortCheck{{Pod: "checkout-1", Seen: true, LeftSlicesNS: 4e6, LastAnswerNS: ns(5006)}},
				Windows: []PodWindow{{Pod: "checkout-1", WindowNS: ns(1204), UncertaintyNS: 14e6, ListenerClosedNS: ns(5010), Source: SourceTermination}}},
			{N: 2, Started: t0.Add(time.Minute), DurationNS: int64(8700 * time.Millisecond), DrainedNS: int64(40 * time.Second), Complete: true,
				Outcomes: Outcomes{OK: 2380, Failed: map[string]int{"status_502": 3, "refused": 1}},
				Failures: []Failure{
					{AtNS: 1e9, Kind: "status_502", Side: SideShutdown, Pod: "checkout-2", SinceNS: 12e6, Basis: BasisListener},
					{AtNS: 2e9, Kind: "status_502", Side: SideShutdown, Pod: "checkout-2", SinceNS: 1012e6, Basis: BasisListener},
					{AtNS: 3e9, Kind: "status_502", Side: SideStartup, Pod: "checkout-4", SinceNS: 300e6, Basis: BasisListener},
					{AtNS: 4e9, Kind: "refused", Side: SideShutdown, Pod: "checkout-3", SinceNS: 5e6, Basis: BasisListener},
				},
				Exits: []PodExit{{Pod: "checkout-2", Container: "app", ExitCode: 137, Reason: "Error"}},
				Ports: []PortCheck{{Pod: "checkout-2", Seen: true, LeftSlicesNS: 9e6, RefusedNS: ns(2)}},
				Windows: []PodWindow{
					{Pod: "checkout-2", WindowNS: ns(2), UncertaintyNS: 14e6, ListenerClosedNS: ns(2), Source: SourceTermination, Floor: true,
						FloorWhy: "the app stopped listening while its address was still ready in the EndpointSlices: later connections were refused, not seen; 2 failed requests attributed to its shutdown: traffic its sidecar could not see"},
					{Pod: "checkout-3", Unreadable: "GET /timeline of pod shop/checkout-3 port 9091 through the pod proxy: the server is currently unable to handle the request; no termination message in its final status"},
				}},
		},
		MaxFailures: 0, Requested: 2, Sidecar: true,
	}
	r.Verdict = decide(r, 2)
	return r
}

func TestRenderGolden(t *testing.T) {
	blind := &Report{Namespace: "shop", Deployment: "checkout", URL: "http://10.0.0.10/", Method: "GET", Rate: 5, Replicas: 2,
		SelfTest: &SelfTest{Namespace: "epwindow-verify-abc123", Replicas: 2, Terminations: 2, Blind: true, Outcomes: Outcomes{OK: 60}}, Rollouts: []Rollout{}}
	blind.SelfTest.Cause = blindCause("GET", nil)
	blind.Verdict = decide(blind, 3)
	for _, tc := range []struct {
		file string
		rep  *Report
		r    Reporter
	}{
		{"report.txt", sample(), Text}, {"report.json", sample(), JSON}, {"report.md", sample(), Markdown},
		{"report.junit.xml", sample(), JUnit}, {"blind.txt", blind, Text}, {"blind.junit.xml", blind, JUnit},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.r(&b, tc.rep); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./verify -update)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("%s differs from the golden file:\n%s", tc.file, b.String())
			}
		})
	}
}

// TestJUnitAgreesWithVerdict reads the JUnit file with a JUnit consumer
// (github.com/joshdk/go-junit, as CI report plugins read it) and checks
// that its totals fail exactly when the verdict does (exit 0 only for a
// passing verdict: cmd/epwindow), case by case.
func TestJUnitAgreesWithVerdict(t *testing.T) {
	ok := func(n int) Rollout { return Rollout{N: n, Complete: true, Outcomes: Outcomes{OK: 100}} }
	failing := func(n, k int) Rollout {
		ro := ok(n)
		ro.Outcomes.Failed = map[string]int{"status_502": k}
		return ro
	}
	exited := func(n int, code int32) Rollout {
		ro := ok(n)
		ro.Exits = []PodExit{{Pod: "web-1", Container: "app", ExitCode: code, Reason: "Error"}}
		return ro
	}
	clean := &Outcomes{OK: 300}
	for _, tc := range []struct {
		name      string
		rep       Report
		requested int
		pass      bool
		// failedCase names the case that must fail.
		failedCase string
	}{
		{"clean", Report{Baseline: clean, Rollouts: []Rollout{ok(1), ok(2)}}, 2, true, ""},
		{"within --max-failures", Report{Baseline: clean, MaxFailures: 3, Rollouts: []Rollout{failing(1, 1), failing(2, 2)}}, 2, true, ""},
		// Each rollout is within the limit; their sum is not.
		{"over --max-failures in total", Report{Baseline: clean, MaxFailures: 2, Rollouts: []Rollout{failing(1, 2), failing(2, 1)}}, 2, false, "rollout 2"},
		{"dirty baseline", Report{Baseline: &Outcomes{OK: 300, Failed: map[string]int{"refused": 1}}, Rollouts: []Rollout{ok(1)}}, 1, false, "baseline: the route answers before any rollout"},
		{"fewer rollouts ran", Report{Baseline: clean, Rollouts: []Rollout{ok(1)}}, 3, false, "rollouts: 3 requested"},
		{"not complete", Report{Baseline: clean, Rollouts: []Rollout{{N: 1, Condition: "ProgressDeadlineExceeded: x"}}}, 1, false, "rollout 1"},
		{"exit 143", Report{Baseline: clean, Rollouts: []Rollout{exited(1, 143)}}, 1, false, "rollout 1"},
		{"exit 143 allowed", Report{Baseline: clean, AllowExitCodes: []int32{143}, Rollouts: []Rollout{exited(1, 143)}}, 1, true, ""},
		{"exit 137 even if listed", Report{Baseline: clean, AllowExitCodes: []int32{143}, Rollouts: []Rollout{exited(1, 137)}}, 1, false, "rollout 1"},
		{"blind", Report{Baseline: clean, SelfTest: &SelfTest{Blind: true}}, 3, false, "self-test: broken canary fails requests"},
		{"interrupted", Report{Baseline: clean, Interrupted: true, Rollouts: []Rollout{ok(1)}}, 2, false, "rollouts: 2 requested"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := tc.rep
			rep.Requested = tc.requested
			rep.Verdict = decide(&rep, tc.requested)
			if rep.Verdict.Pass != tc.pass {
				t.Fatalf("verdict pass %v, want %v: %q", rep.Verdict.Pass, tc.pass, rep.Verdict.Reasons)
			}
			var b bytes.Buffer
			if err := JUnit(&b, &rep); err != nil {
				t.Fatal(err)
			}
			suites, err := junit.Ingest(b.Bytes())
			if err != nil || len(suites) != 1 {
				t.Fatalf("go-junit reads %d suites: %v\n%s", len(suites), err, b.String())
			}
			tot := suites[0].Totals
			if (tot.Failed+tot.Error == 0) != tc.pass || tot.Tests != len(suites[0].Tests) || tot.Passed+tot.Failed+tot.Error+tot.Skipped != tot.Tests {
				t.Errorf("totals %+v disagree with the verdict (pass %v)\n%s", tot, tc.pass, b.String())
			}
			for _, c := range suites[0].Tests {
				if c.Status == junit.StatusFailed && c.Name != tc.failedCase {
					t.Errorf("case %q failed, want only %q: %v", c.Name, tc.failedCase, c.Error)
				}
				if c.Name == tc.failedCase && c.Status != junit.StatusFailed {
					t.Errorf("case %q: status %s, want failed", c.Name, c.Status)
				}
			}
		})
	}
	// The run's own error (exit 1) fails the file too.
	rep := Report{Baseline: clean, Requested: 1, Rollouts: []Rollout{ok(1)}}
	rep.Verdict = Verdict{Reasons: []string{"the run failed: failure history lost failures"}}
	var b bytes.Buffer
	if err := JUnit(&b, &rep); err != nil {
		t.Fatal(err)
	}
	if suites, err := junit.Ingest(b.Bytes()); err != nil || suites[0].Totals.Failed != 1 {
		t.Errorf("a failed run: %v, totals %+v, want one failed case", err, suites[0].Totals)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	var b bytes.Buffer
	if err := JSON(&b, sample()); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(&back)
	first, _ := json.Marshal(sample())
	if !bytes.Equal(again, first) {
		t.Errorf("round trip differs:\n%s\n%s", first, again)
	}
}

func TestUpstreamDown(t *testing.T) {
	for _, c := range []struct {
		failed map[string]int
		want   bool
	}{
		{map[string]int{"status_502": 300}, true},
		{map[string]int{"status_503": 20, "status_404": 5}, true},
		{map[string]int{"status_404": 300}, false},
		{map[string]int{"refused": 300}, false},
		{map[string]int{"status_502": 5, "timeout": 5}, false},
		{nil, false},
	} {
		if got := upstreamDown(Outcomes{Failed: c.failed}); got != c.want {
			t.Errorf("upstreamDown(%v) = %v, want %v", c.failed, got, c.want)
		}
	}
}
