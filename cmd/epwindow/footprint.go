package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/epwindow/epwindow/results"
)

// apiCounter counts the requests a run sends to the API server, by kind,
// at the transport (rest.Config.Wrap), so every client built from the
// config afterwards is counted: the footprint of a run on a production
// control plane. Reads through the pod proxy (probe timelines, runner
// stats with their stream logs) are counted with the bytes of their
// responses: the API server relays each of them.
type apiCounter struct {
	total, watches, lists, writes atomic.Int64
	proxyReads, proxyBytes        atomic.Int64
}

func (a *apiCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		a.total.Add(1)
		proxy := false
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			a.watches.Add(1)
		case r.Method == http.MethodGet && r.URL.Query().Has("labelSelector"), r.Method == http.MethodGet && r.URL.Query().Has("limit"):
			a.lists.Add(1)
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			a.writes.Add(1)
		case strings.Contains(r.URL.Path, "/proxy/"):
			proxy = true
			a.proxyReads.Add(1)
		}
		resp, err := rt.RoundTrip(r)
		if proxy && resp != nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &a.proxyBytes}
		}
		return resp, err
	})
}

// countingBody adds the bytes read from a response body to n.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cost is what the run cost by elapsed: the requests counted, and this
// process's peak RSS and CPU time.
func (a *apiCounter) cost(elapsed time.Duration) results.RunCost {
	c := results.RunCost{
		APIRequests: a.total.Load(), Watches: a.watches.Load(), Lists: a.lists.Load(), Writes: a.writes.Load(),
		ProxyReads: a.proxyReads.Load(), ProxyBytes: a.proxyBytes.Load(), ElapsedNS: int64(elapsed),
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		c.CPUNS = ru.Utime.Nano() + ru.Stime.Nano()
		// Linux reports ru_maxrss in KiB (getrusage(2)).
		c.PeakRSSBytes = ru.Maxrss * 1024
		if hwm, ok := peakRSS(); ok {
			c.PeakRSSBytes = hwm
		}
	}
	return c
}

// footprint prints what the run cost: API requests in total, per trial
// and per minute, the pod-proxy reads, and the process's peak RSS and CPU
// time.
func footprint(w io.Writer, c results.RunCost, trials int) {
	n := c.APIRequests
	perTrial := "n/a"
	if trials > 0 {
		perTrial = fmt.Sprintf("%.1f", float64(n)/float64(trials))
	}
	elapsed := time.Duration(c.ElapsedNS)
	// A rate over less than a minute is a burst extrapolated (a run that
	// failed its checks in 0.2 s "made 400,000 a minute"): the rate
	// needs a minute of run.
	rate := "over " + elapsed.Round(time.Second).String()
	if elapsed >= time.Minute {
		rate = fmt.Sprintf("%.0f per minute %s", float64(n)/elapsed.Minutes(), rate)
	}
	fmt.Fprintf(w, "footprint: %d API requests (%d watches, %d lists, %d writes), %s per trial, %s",
		n, c.Watches, c.Lists, c.Writes, perTrial, rate)
	if c.ProxyReads > 0 {
		fmt.Fprintf(w, "; %d pod-proxy reads (%.1f kB)", c.ProxyReads, float64(c.ProxyBytes)/1000)
	}
	if c.PeakRSSBytes > 0 {
		fmt.Fprintf(w, "; peak RSS %.0f MiB, CPU %s", float64(c.PeakRSSBytes)/(1<<20), time.Duration(c.CPUNS).Round(10*time.Millisecond))
	}
	fmt.Fprintln(w)
}

// peakRSS is this program's peak resident set size in bytes: VmHWM of
// /proc/self/status, the high-water mark of the current address space.
// getrusage's ru_maxrss is not that: the kernel carries the peak of the
// image a process ran before execve into it (fs/exec.c, exec_mmap:
// setmax_mm_hiwater_rss), so a measure started by a large parent that
// exec'd it (a container shim, a wrapper) reported the parent's peak.
func peakRSS() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, false
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb * 1024, err == nil && kb > 0
		}
	}
	return 0, false
}
