package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// testdata/unit.json and testdata/e2e.json are `go test -json -count=1`
// streams recorded with go1.26 from a throwaway module: unit.json of a
// passing package (a skipped test, subtests) and one without test files;
// e2e.json of a package that does not compile, one with a failed test and
// a failed subtest, one whose test panics, and e2e/cluster, whose TestMain
// sleeps and writes localcluster-timing lines as internal/localcluster
// does (one cluster in TestMain, a stop and a start inside a test).

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./hack/testtimes -update rewrites it); got:\n%s", path, got)
	}
}

func TestSummaryReport(t *testing.T) {
	s, err := readFiles([]string{"testdata/unit.json", "testdata/e2e.json"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := s.Report(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "summary.golden", b.Bytes())

	byName := map[string]*Package{}
	for _, p := range s.Packages() {
		byName[p.Phase+" "+p.Name] = p
	}
	for _, tc := range []struct {
		key                   string
		status                string
		buildFailed           bool
		clusters              int
		lockWait, start, stop time.Duration
	}{
		{key: "unit example.com/rec/pass", status: "pass"},
		{key: "unit example.com/rec/notests", status: "skip"},
		{key: "e2e example.com/rec/broken", status: "fail", buildFailed: true},
		{key: "e2e example.com/rec/fail", status: "fail"},
		{key: "e2e example.com/rec/panics", status: "fail"},
		{key: "e2e example.com/rec/e2e/cluster", status: "pass", clusters: 2,
			lockWait: 200 * time.Millisecond, start: 400 * time.Millisecond, stop: 150 * time.Millisecond},
	} {
		t.Run(tc.key, func(t *testing.T) {
			p := byName[tc.key]
			if p == nil {
				t.Fatalf("no package %q in %v", tc.key, byName)
			}
			if p.Status != tc.status || p.BuildFailed != tc.buildFailed {
				t.Errorf("status %s, build failed %v; want %s, %v", p.Status, p.BuildFailed, tc.status, tc.buildFailed)
			}
			if p.Clusters != tc.clusters || p.LockWait != tc.lockWait || p.Start != tc.start || p.Stop != tc.stop {
				t.Errorf("clusters %d, lock wait %s, start %s, stop %s; want %d, %s, %s, %s",
					p.Clusters, p.LockWait, p.Start, p.Stop, tc.clusters, tc.lockWait, tc.start, tc.stop)
			}
		})
	}
	if got, want := byName["e2e example.com/rec/e2e/cluster"].TestTime(), 1262*time.Millisecond-750*time.Millisecond; got != want {
		t.Errorf("e2e/cluster TestTime %s, want %s", got, want)
	}
}

func TestTestTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Package
		want time.Duration
	}{
		{"no cluster", Package{Elapsed: 10 * time.Second}, 0},
		{"rest of the wall time", Package{Elapsed: 100 * time.Second, Clusters: 1, LockWait: 30 * time.Second, Start: 40 * time.Second, Stop: 5 * time.Second}, 25 * time.Second},
		// Elapsed has 10 ms precision, the timing lines 1 ms.
		{"never negative", Package{Elapsed: 1 * time.Second, Clusters: 1, Start: 1001 * time.Millisecond}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.TestTime(); got != tc.want {
				t.Errorf("TestTime() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAddTiming(t *testing.T) {
	for _, tc := range []struct {
		line                  string
		clusters              int
		lockWait, start, stop time.Duration
	}{
		{line: "localcluster-timing: lock_wait=1m2.5s start=48.25s\n", clusters: 1, lockWait: 62500 * time.Millisecond, start: 48250 * time.Millisecond},
		{line: "localcluster-timing: stop=6.1s\n", stop: 6100 * time.Millisecond},
		{line: "    localcluster-timing: stop=bad\n"},
		{line: "a test's log: localcluster-timing: stop=1s\n"},
		{line: "ok  \tpkg\t1.2s\n"},
	} {
		t.Run(strings.TrimSpace(tc.line), func(t *testing.T) {
			var p Package
			p.addTiming(tc.line)
			if p.Clusters != tc.clusters || p.LockWait != tc.lockWait || p.Start != tc.start || p.Stop != tc.stop {
				t.Errorf("clusters %d, lock wait %s, start %s, stop %s; want %d, %s, %s, %s",
					p.Clusters, p.LockWait, p.Start, p.Stop, tc.clusters, tc.lockWait, tc.start, tc.stop)
			}
		})
	}
}

// The console shows build errors, each failed test's whole output (with
// its failed subtests', not its passing ones'), and a panic's trace; not
// what passing or skipped tests logged.
func TestConsole(t *testing.T) {
	for _, name := range []string{"unit", "e2e"} {
		t.Run(name, func(t *testing.T) {
			in, err := os.Open(filepath.Join("testdata", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			var saved, out bytes.Buffer
			res, err := run(in, &saved, &out, name)
			if err != nil {
				t.Fatal(err)
			}
			if want := name == "e2e"; res.Failed != want {
				t.Errorf("failed %v, want %v", res.Failed, want)
			}
			recorded, _ := os.ReadFile(filepath.Join("testdata", name+".json"))
			if !bytes.Equal(saved.Bytes(), recorded) {
				t.Error("the saved stream differs from the input")
			}
			golden(t, name+".console.golden", out.Bytes())
			for _, hidden := range []string{"a passing test's log", "not shown: this test passed", "needs something absent", "TestTable/good"} {
				if strings.Contains(out.String(), hidden) {
					t.Errorf("console shows %q, from a test that did not fail", hidden)
				}
			}
		})
	}
}

// make test fails exactly when go test does: the command's status, or 1
// when it exits 0 on a stream that reports a failure.
func TestRunExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         int
	}{
		{"pass", "cat testdata/unit.json", 0},
		{"go test fails", "cat testdata/e2e.json; exit 1", 1},
		{"status kept", "cat testdata/unit.json; exit 3", 3},
		{"stream fails, exit 0", "cat testdata/e2e.json", 1},
		{"no stream", "exit 2", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "phase.json")
			var stdout, stderr bytes.Buffer
			if got := runMain(&stdout, &stderr, out, []string{"sh", "-c", tc.script}); got != tc.want {
				t.Errorf("status %d, want %d; stdout:\n%s\nstderr:\n%s", got, tc.want, &stdout, &stderr)
			}
			if _, err := os.Stat(out); err != nil {
				t.Error(err)
			}
			if tc.want != 0 && !strings.Contains(stdout.String(), "test packages, slowest first") {
				t.Errorf("a failed run prints no table:\n%s", &stdout)
			}
		})
	}
}
