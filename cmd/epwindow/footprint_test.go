package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
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
	footprint(&out, a.cost(2*time.Minute), 3)
	if s := out.String(); !strings.Contains(s, "6 API requests (2 watches, 1 lists, 2 writes), 2.0 per trial, 3 per minute over 2m0s") || !strings.Contains(s, "peak RSS") {
		t.Errorf("footprint line %q", s)
	}
	// A run that ended in a fraction of a second has no rate a minute.
	out.Reset()
	footprint(&out, a.cost(200*time.Millisecond), 0)
	if s := out.String(); strings.Contains(s, "per minute") || !strings.Contains(s, "n/a per trial, over 0s") {
		t.Errorf("footprint line of a 0.2 s run %q: want no rate a minute", s)
	}
}

// TestAPICounterProxyBytes: reads through the pod proxy (probe timelines,
// runner stats with their stream logs) are counted with the bytes they
// move, which a re-fetched log would multiply.
func TestAPICounterProxyBytes(t *testing.T) {
	body := strings.Repeat("x", 1500)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/proxy/") {
			w.Write([]byte(body))
		}
	}))
	defer srv.Close()
	a := &apiCounter{}
	c := &http.Client{Transport: a.wrap(http.DefaultTransport)}
	for _, path := range []string{
		"/api/v1/namespaces/ns/pods/load-a:9091/proxy/stats?streams_since=0",
		"/api/v1/namespaces/ns/pods/probe-b:8080/proxy/timeline",
		"/api/v1/namespaces/ns/pods/p",
	} {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if a.proxyReads.Load() != 2 || a.proxyBytes.Load() != 3000 {
		t.Errorf("proxy reads %d bytes %d; want 2, 3000", a.proxyReads.Load(), a.proxyBytes.Load())
	}
	var out bytes.Buffer
	footprint(&out, a.cost(time.Minute), 1)
	if s := out.String(); !strings.Contains(s, "2 pod-proxy reads (3.0 kB)") {
		t.Errorf("footprint line %q: want the pod-proxy reads and their bytes", s)
	}
}

// The peak RSS a footprint line reports is measure's own, not that of the
// process it was exec'd from: a 300 MiB parent that execs the program
// leaves ru_maxrss at 300 MiB (the kernel carries it over), while the
// program itself stays below.
func TestPeakRSSIsThisImage(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), peakParent+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var peak, maxrss int64
	if _, err := fmt.Sscan(string(out), &peak, &maxrss); err != nil {
		t.Fatalf("helper printed %q: %v", out, err)
	}
	if maxrss < 300<<20 {
		t.Skipf("this kernel reports ru_maxrss %d MiB after the exec: it does not carry the parent's peak, nothing to tell apart", maxrss>>20)
	}
	// The program's own peak: tens of MiB, some 140 under -race (its
	// shadow memory), never the parent's 300.
	if peak <= 0 || peak > 250<<20 {
		t.Errorf("peak RSS after exec from a 300 MiB parent: %d MiB (ru_maxrss %d MiB), want the program's own, under 250 MiB", peak>>20, maxrss>>20)
	}
}

// The helper modes of TestPeakRSSIsThisImage: a parent that touches
// 300 MiB and execs the test binary, which prints peakRSS and ru_maxrss.
const (
	peakParent = "EPWINDOW_TEST_PEAK_PARENT"
	peakChild  = "EPWINDOW_TEST_PEAK_CHILD"
)

var ballast []byte

func peakHelpers() {
	switch {
	case os.Getenv(peakParent) == "1":
		ballast = make([]byte, 300<<20)
		for i := range ballast {
			if i%4096 == 0 {
				ballast[i] = 1
			}
		}
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, peakParent+"=") {
				env = append(env, kv)
			}
		}
		env = append(env, peakChild+"=1")
		err := syscall.Exec("/proc/self/exe", os.Args[:1], env)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	case os.Getenv(peakChild) == "1":
		peak, _ := peakRSS()
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		fmt.Println(peak, ru.Maxrss*1024)
		os.Exit(0)
	}
}
