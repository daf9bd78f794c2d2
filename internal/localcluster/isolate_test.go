package localcluster

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// isolateProbeEnv makes this test binary the subject of TestIsolate: it
// calls Isolate, reports what it sees in its namespaces and exits 3.
const isolateProbeEnv = "LOCALCLUSTER_TEST_ISOLATE_PROBE"

func TestMain(m *testing.M) {
	if path := os.Getenv(isolateProbeEnv); path != "" {
		Isolate()
		os.Exit(isolateProbe(path))
	}
	os.Exit(m.Run())
}

// isolateReport is what the isolated copy saw.
type isolateReport struct {
	NetNS      string `json:"netns"`
	Isolated   bool   `json:"isolated"`
	LoopbackOK string `json:"loopback"`
	RunEntries int    `json:"run_entries"`
	// Devices are /sys/class/net's entries.
	Devices []string `json:"devices"`
}

// isolateProbe writes the report to path (a file on the machine's
// filesystem, outside /run), a marker into the copy's /run, and returns 3.
func isolateProbe(path string) int {
	var r isolateReport
	r.NetNS, _ = os.Readlink("/proc/self/ns/net")
	r.Isolated = isolated
	r.LoopbackOK = "ok"
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err != nil {
		r.LoopbackOK = err.Error()
	} else {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			r.LoopbackOK = err.Error()
		} else {
			c.Close()
		}
		ln.Close()
	}
	devs, _ := os.ReadDir("/sys/class/net")
	for _, d := range devs {
		r.Devices = append(r.Devices, d.Name())
	}
	entries, _ := os.ReadDir("/run")
	r.RunEntries = len(entries)
	_ = os.WriteFile(filepath.Join("/run", "localcluster-isolate-test"), nil, 0o644)
	b, _ := json.Marshal(r)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return 3
}

// TestIsolate runs this binary through Isolate: the copy has a network
// namespace of its own with loopback up, an empty private /run whose files
// never reach the machine's, and its exit status is the binary's.
func TestIsolate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("Isolate needs root (a network namespace)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), isolateProbeEnv+"="+report)
	out, err := cmd.CombinedOutput()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 3 {
		t.Fatalf("isolated binary: %v, want exit status 3; output:\n%s", err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("no report from the isolated copy: %v; output:\n%s", err, out)
	}
	var r isolateReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	own, _ := os.Readlink("/proc/self/ns/net")
	if r.NetNS == "" || r.NetNS == own {
		t.Errorf("isolated copy's network namespace %q, want one other than the test's %q", r.NetNS, own)
	}
	if !r.Isolated {
		t.Error("isolated copy did not mark itself isolated: Start would take the machine lock")
	}
	if r.LoopbackOK != "ok" {
		t.Errorf("loopback in the isolated copy: %s", r.LoopbackOK)
	}
	// netns and lock, made by enterIsolated.
	if r.RunEntries != 2 {
		t.Errorf("isolated copy's /run has %d entries, want its own empty tmpfs with netns and lock", r.RunEntries)
	}
	// A new network namespace has only loopback: /sys must show that, not
	// the machine's devices (the node agent finds its bridge there).
	if !slices.Equal(r.Devices, []string{"lo"}) {
		t.Errorf("isolated copy's /sys/class/net lists %v, want only lo", r.Devices)
	}
	if _, err := os.Stat("/run/localcluster-isolate-test"); err == nil {
		os.Remove("/run/localcluster-isolate-test")
		t.Error("a file the isolated copy wrote in /run reached the machine's /run")
	}
}
