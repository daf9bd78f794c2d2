package localcluster

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseReady(t *testing.T) {
	tests := []struct {
		line    string
		want    Cluster
		wantErr bool
	}{
		{
			line: "READY kubeconfig=/tmp/x/kubeconfig ingress=http://127.0.0.1:4000 routes=http://127.0.0.1:4001/routes",
			want: Cluster{Kubeconfig: "/tmp/x/kubeconfig", IngressURL: "http://127.0.0.1:4000", RoutesURL: "http://127.0.0.1:4001/routes"},
		},
		{line: "READY kubeconfig=/tmp/x/kubeconfig", wantErr: true},
		{line: "READY", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			var c Cluster
			err := c.parseReady(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseReady error = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (c.Kubeconfig != tt.want.Kubeconfig || c.IngressURL != tt.want.IngressURL || c.RoutesURL != tt.want.RoutesURL) {
				t.Errorf("parseReady = %+v, want %+v", c, tt.want)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		{"defaults", Options{}, []string{"up", "--dir", "/d", "--nodes", "2", "--batch-period", "0s", "--ingress-poll", "3s"}},
		{"set", Options{Nodes: 1, BatchPeriod: 750 * time.Millisecond, IngressPoll: time.Second},
			[]string{"up", "--dir", "/d", "--nodes", "1", "--batch-period", "750ms", "--ingress-poll", "1s"}},
		{"kube-proxy", Options{ProxyMode: "nftables", ProxyMinSyncPeriod: 4 * time.Second},
			[]string{"up", "--dir", "/d", "--nodes", "2", "--batch-period", "0s", "--ingress-poll", "3s", "--proxy-mode", "nftables", "--proxy-min-sync-period", "4s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.withDefaults().args("/d"); !slices.Equal(got, tt.want) {
				t.Errorf("args = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBinaryNamesTheFix(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("RepoRoot: %v", err)
	}
	if _, err := Binary(); err != nil && !strings.Contains(err.Error(), "run make cluster") {
		t.Errorf("Binary() error %q does not say how to build it (root %s)", err, root)
	}
	if err := RequireBinaries("no-such-binary-epwindow"); err == nil || !strings.Contains(err.Error(), "run make cluster") {
		t.Errorf("RequireBinaries(missing) = %v, want an error naming make cluster", err)
	}
}
