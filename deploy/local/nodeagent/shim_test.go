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
	before := rootAndDevMounts(t)
	host, _ := os.Hostname()
	out, err := exec.Command(exe, ShimArg, `{"netns":"/nonexistent","hostname":"should-not-be-set"}`).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 128 || !strings.Contains(string(out), "refusing to run in the parent's mnt namespace") {
		t.Fatalf("shim without namespaces: err %v, output %q; want exit 128 and a refusal", err, out)
	}
	after := rootAndDevMounts(t)
	if before != after {
		t.Errorf("mount table changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if h, _ := os.Hostname(); h != host {
		t.Errorf("hostname changed from %q to %q", host, h)
	}
}

// rootAndDevMounts is the mountinfo of / and /dev… (what a misplaced shim
// would change); other mounts come and go with other tests' namespaces.
func rootAndDevMounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == "/" || f[4] == "/dev" || strings.HasPrefix(f[4], "/dev/")) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
