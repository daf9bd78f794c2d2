package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAPICounter: the counting transport sees every request and sorts
// watches, lists and writes as the API server would.
func TestAPICounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	a := &apiCounter{}
	c := &http.Client{Transport: a.wrap(http.DefaultTransport)}
	for _, r := range []struct{ method, path string }{
		{"GET", "/api/v1/namespaces/ns/pods?labelSelector=app%3Dprobe&limit=500"},
		{"GET", "/api/v1/namespaces/ns/pods?labelSelector=app%3Dprobe&watch=true"},
		{"GET", "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?watch=1"},
		{"DELETE", "/api/v1/namespaces/ns/pods/p"},
		{"POST", "/api/v1/namespaces"},
		{"GET", "/api/v1/namespaces/ns/pods/p"},
	} {
		req, _ := http.NewRequest(r.method, srv.URL+r.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if a.total.Load() != 6 || a.watches.Load() != 2 || a.lists.Load() != 1 || a.writes.Load() != 2 {
		t.Errorf("total %d watches %d lists %d writes %d; want 6, 2, 1, 2", a.total.Load(), a.watches.Load(), a.lists.Load(), a.writes.Load())
	}
	var out bytes.Buffer
	footprint(&out, a, 3, 2*time.Minute)
	if s := out.String(); !strings.Contains(s, "6 API requests (2 watches, 1 lists, 2 writes), 2.0 per trial, 3 per minute over 2m0s") || !strings.Contains(s, "peak RSS") {
		t.Errorf("footprint line %q", s)
	}
}
