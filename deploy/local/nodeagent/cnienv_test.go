package nodeagent

import (
	"slices"
	"testing"

	"github.com/epwindow/epwindow/deploy/local/internal/child"
)

// A CNI plugin gets its CNI_* arguments and the system PATH, never the rest
// of the environment libcni hands over (this process's, the user's).
func TestCNIEnv(t *testing.T) {
	in := []string{"HOME=/root", "KUBECONFIG=/home/me/.kube/config", "HTTPS_PROXY=http://127.0.0.1:1", "PATH=/home/me/bin",
		"CNI_COMMAND=ADD", "CNI_CONTAINERID=abc", "CNI_NETNS=/var/run/netns/epw-x", "CNI_IFNAME=eth0", "CNI_ARGS=", "CNI_PATH=/usr/lib/cni"}
	want := []string{"PATH=" + child.SystemPath, "CNI_COMMAND=ADD", "CNI_CONTAINERID=abc", "CNI_NETNS=/var/run/netns/epw-x",
		"CNI_IFNAME=eth0", "CNI_ARGS=", "CNI_PATH=/usr/lib/cni"}
	if got := cniEnv(in); !slices.Equal(got, want) {
		t.Errorf("cniEnv\n got %q\nwant %q", got, want)
	}
}
