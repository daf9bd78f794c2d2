package nodeagent

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The shim changes mounts and the hostname; started without the agent's
// fresh namespaces it must refuse before touching anything.
func TestShimRefusesParentNamespaces(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	out, err := exec.Command(exe, ShimArg, `{"netns":"/nonexistent","hostname":"should-not-be-set"}`).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 128 || !strings.Contains(string(out), "refusing to run in the parent's mnt namespace") {
		t.Fatalf("shim without namespaces: err %v, output %q; want exit 128 and a refusal", err, out)
	}
	after, _ := os.ReadFile("/proc/self/mountinfo")
	if string(before) != string(after) {
		t.Errorf("mount table changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if h, _ := os.Hostname(); h != host {
		t.Errorf("hostname changed from %q to %q", host, h)
	}
}
