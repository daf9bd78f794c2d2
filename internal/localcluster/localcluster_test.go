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
		{
			line: "READY kubeconfig=/k traefik=http://127.0.0.1:5000 traefik-https=https://127.0.0.1:5002 traefik-api=http://127.0.0.1:5001 gateway=traefik/traefik",
			want: Cluster{Kubeconfig: "/k", TraefikURL: "http://127.0.0.1:5000", TraefikHTTPSURL: "https://127.0.0.1:5002", TraefikAPIURL: "http://127.0.0.1:5001", Gateway: "traefik/traefik"},
		},
		{
			line: "READY kubeconfig=/k ingress=http://127.0.0.1:4000 routes=http://127.0.0.1:4001/routes traefik=http://127.0.0.1:5000 traefik-https=https://127.0.0.1:5002 traefik-api=http://127.0.0.1:5001 gateway=traefik/traefik",
			want: Cluster{Kubeconfig: "/k", IngressURL: "http://127.0.0.1:4000", RoutesURL: "http://127.0.0.1:4001/routes",
				TraefikURL: "http://127.0.0.1:5000", TraefikHTTPSURL: "https://127.0.0.1:5002", TraefikAPIURL: "http://127.0.0.1:5001", Gateway: "traefik/traefik"},
		},
		// Traefik's line without its Gateway is not a whole one.
		{line: "READY kubeconfig=/k traefik=http://127.0.0.1:5000 traefik-api=http://127.0.0.1:5001", wantErr: true},
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
			if err == nil && (c.Kubeconfig != tt.want.Kubeconfig || c.IngressURL != tt.want.IngressURL || c.RoutesURL != tt.want.RoutesURL ||
				c.TraefikURL != tt.want.TraefikURL || c.TraefikAPIURL != tt.want.TraefikAPIURL || c.Gateway != tt.want.Gateway) {
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
		{"traefik", Options{Ingress: "traefik", TraefikThrottle: 500 * time.Millisecond},
			[]string{"up", "--dir", "/d", "--nodes", "2", "--batch-period", "0s", "--ingress-poll", "3s", "--ingress", "traefik", "--traefik-throttle", "500ms"}},
		{"traefik unthrottled", Options{Ingress: "all", TraefikNoThrottle: true},
			[]string{"up", "--dir", "/d", "--nodes", "2", "--batch-period", "0s", "--ingress-poll", "3s", "--ingress", "all", "--traefik-throttle", "0s"}},
		{"production shape", Options{MaxEndpointsPerSlice: 5, Ballast: "2000x5", Churn: 2.5},
			[]string{"up", "--dir", "/d", "--nodes", "2", "--batch-period", "0s", "--ingress-poll", "3s", "--max-endpoints-per-slice", "5", "--ballast", "2000x5", "--churn", "2.5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.withDefaults().args("/d"); !slices.Equal(got, tt.want) {
				t.Errorf("args = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBinariesFollowIngress(t *testing.T) {
	for _, tt := range []struct {
		ingress string
		want    []string
	}{
		{"", []string{"epwindow-local", "skipper"}},
		{"skipper", []string{"epwindow-local", "skipper"}},
		{"traefik", []string{"epwindow-local", "traefik", "gateway-api-crds"}},
		{"all", []string{"epwindow-local", "skipper", "traefik", "gateway-api-crds"}},
	} {
		if got := (Options{Ingress: tt.ingress}).binaries(); !slices.Equal(got, tt.want) {
			t.Errorf("Ingress %q: binaries %q, want %q", tt.ingress, got, tt.want)
		}
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
