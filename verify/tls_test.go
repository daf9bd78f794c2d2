package verify

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/internal/testcert"
	"github.com/epwindow/epwindow/measure/load"
)

// TestIngressTLS: an https --url is reached with --host as the server name
// (SNI) and verified against --ingress-ca; --ingress-insecure skips the
// verification; without either, a self-signed certificate fails every
// request. The server stands in for the ingress's TLS entry point on
// loopback.
func TestIngressTLS(t *testing.T) {
	const host = "shop.epwindow.test"
	cert, ca := testcert.SelfSigned(t, host)
	var mu sync.Mutex
	var sni []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(load.HeaderPod, "web-1")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		mu.Lock()
		sni = append(sni, h.ServerName)
		mu.Unlock()
		return nil, nil
	}}
	srv.StartTLS()
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/")

	for _, tc := range []struct {
		name     string
		ca       string
		insecure bool
		ok       bool
	}{
		{"--ingress-ca", ca, false, true},
		{"--ingress-insecure", "", true, true},
		{"system roots", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := IngressTLS(tc.ca, tc.insecure, u)
			if err != nil {
				t.Fatal(err)
			}
			g, err := load.New(load.Config{URL: u.String(), Host: host, Rate: 50, Timeout: time.Second, TLS: cfg}, clock.RealClock{})
			if err != nil {
				t.Fatal(err)
			}
			// Run until 5 requests have an outcome (a TLS handshake under
			// -race on a loaded machine takes a while), at most 30 s.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stopped := make(chan struct{})
			go func() { _ = g.Run(ctx); close(stopped) }()
			for tot := g.Totals(); tot.OK+tot.Failed < 5 && ctx.Err() == nil; tot = g.Totals() {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			<-stopped
			tot := g.Totals()
			if tc.ok && (tot.OK < 5 || tot.Failed != 0) || !tc.ok && (tot.OK != 0 || tot.Failed < 5) {
				t.Errorf("ok %d failed %d (%v), want all to %v", tot.OK, tot.Failed, g.FailureTotals(), map[bool]string{true: "pass", false: "fail"}[tc.ok])
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range sni {
		if s != host {
			t.Fatalf("server name %q, want --host %q", s, host)
		}
	}
	if len(sni) == 0 {
		t.Fatal("no TLS handshake seen")
	}
	for _, bad := range []struct {
		ca       string
		insecure bool
		url      string
		want     string
	}{
		{ca, false, "http://127.0.0.1:1/", "https"},
		{ca, true, u.String(), "choose one"},
		{filepath.Join(t.TempDir(), "none.pem"), false, u.String(), "--ingress-ca"},
	} {
		bu, _ := url.Parse(bad.url)
		if _, err := IngressTLS(bad.ca, bad.insecure, bu); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("IngressTLS(%q, %v, %s) = %v, want an error saying %q", bad.ca, bad.insecure, bad.url, err, bad.want)
		}
	}
}
