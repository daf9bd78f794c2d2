package localcluster

import (
	"strings"
	"testing"
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

func TestBinaryNamesTheFix(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("repoRoot: %v", err)
	}
	if _, err := Binary(); err != nil && !strings.Contains(err.Error(), "run make cluster") {
		t.Errorf("Binary() error %q does not say how to build it (root %s)", err, root)
	}
}
