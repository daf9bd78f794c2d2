package sidecar

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// fakeKernel hands out the sockets the test sets, as a Dumper.
type fakeKernel struct {
	socks []Socket
	po    uint64
}

func (k *fakeKernel) dump(dst []Socket) ([]Socket, bool, error) {
	return append(dst, k.socks...), false, nil
}

func (k *fakeKernel) passiveOpens() (uint64, error) { return k.po, nil }

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestHandlerTimelineClockHealthz(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	k := &fakeKernel{socks: []Socket{listen("8080")}, po: 40}
	s := New(Config{Ports: []int{8080}, Interval: DefaultInterval, PodName: "app-1", MaxPeers: 8,
		Clock: clk, Dump: k.dump, PassiveOpens: k.passiveOpens}, 9091)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("healthz before any dump: %d, want 503", code)
	}
	s.Poll()
	clk.SetTime(ms(10))
	k.socks = append(k.socks, est("10.1.0.1:4000", 7, 12, 4*time.Millisecond))
	k.po = 42
	s.Poll()
	clk.SetTime(ms(15))

	if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("healthz after a dump: %d, want 200", code)
	}
	code, body := get(t, srv.URL+"/clock")
	var c struct {
		Time   time.Time `json:"time"`
		UnixNS int64     `json:"unix_ns"`
	}
	if err := json.Unmarshal(body, &c); code != http.StatusOK || err != nil || c.UnixNS != ms(15).UnixNano() || !c.Time.Equal(ms(15)) {
		t.Errorf("clock: %d %s", code, body)
	}

	code, body = get(t, srv.URL+"/timeline")
	if code != http.StatusOK {
		t.Fatalf("timeline: %d %s", code, body)
	}
	// The JSON names the tool reads, as the probe's timeline spells them.
	for _, name := range []string{`"last_accept":"2026-12-07T12:00:00.01Z"`, `"last_request":"2026-12-07T12:00:00.006Z"`,
		`"listener_open":"2026-12-07T12:00:00Z"`, `"unseen_connections":1`, `"passive_opens":2`, `"interval_ns":10000000`,
		`"peers":[{"addr":"10.1.0.1","accepts":1,`, `"now":"2026-12-07T12:00:00.015Z"`} {
		if !strings.Contains(string(body), name) {
			t.Errorf("timeline lacks %s:\n%s", name, body)
		}
	}
	tl, err := ParseTimeline(body)
	if err != nil {
		t.Fatal(err)
	}
	if tl.Pod != "app-1" || tl.Accepts != 1 || tl.Poll.Polls != 2 || len(tl.Ports) != 1 || tl.Ports[0] != 8080 {
		t.Errorf("timeline %+v", tl)
	}
	if _, err := ParseTimeline([]byte(`{"version":99}`)); err == nil {
		t.Error("version 99 accepted")
	}
}

// Serve polls on its ticker, counts its own accepts apart, and at the end
// stamps sigterm, polls once more and writes the termination log.
func TestServeWritesTerminationLog(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	k := &fakeKernel{socks: []Socket{listen("8080")}, po: 7}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "termination-log")
	s := New(Config{Ports: []int{8080}, Interval: DefaultInterval, PodName: "app-1", MaxPeers: 8,
		TerminationLog: logPath, Clock: clk, Dump: k.dump, PassiveOpens: k.passiveOpens}, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, slog.New(slog.NewTextHandler(io.Discard, nil))) }()

	// One request to the sidecar itself: counted as its own accept, and
	// PassiveOpens' step for it is not an unseen connection.
	if code, _ := get(t, "http://"+ln.Addr().String()+"/healthz"); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}
	k.po = 8
	// The ticker fires once the fake clock passes an interval; wait for
	// that poll through the timeline, not by sleeping.
	deadline := time.After(5 * time.Second)
	for s.Timeline().Poll.Polls < 2 {
		clk.Step(DefaultInterval)
		select {
		case <-deadline:
			t.Fatal("no poll from the ticker within 5 s")
		case <-time.After(time.Millisecond):
		}
	}
	clk.SetTime(ms(500))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := ParseTimeline(b)
	if err != nil {
		t.Fatal(err)
	}
	if tl.Sigterm == nil || !tl.Sigterm.Equal(ms(500)) || tl.OwnAccepts != 1 || tl.UnseenConnections == nil || *tl.UnseenConnections != 0 {
		t.Errorf("termination log: sigterm %v own %d unseen %v", tl.Sigterm, tl.OwnAccepts, tl.UnseenConnections)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Ports: []int{8080}, Interval: DefaultInterval, MaxCPU: DefaultMaxCPU, Listen: DefaultListen, PodName: "p", MaxPeers: 1}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" means valid
	}{
		{"ok", func(*Config) {}, ""},
		{"two ports", func(c *Config) { c.Ports = []int{8080, 8443} }, ""},
		{"no port", func(c *Config) { c.Ports = nil }, "--port is required"},
		{"port 0", func(c *Config) { c.Ports = []int{0} }, "--port 0: must be 1-65535"},
		{"port too big", func(c *Config) { c.Ports = []int{65536} }, "--port 65536"},
		{"own port", func(c *Config) { c.Ports = []int{9091} }, "--port 9091 is the sidecar's own --listen port"},
		{"own port with host", func(c *Config) { c.Listen = "127.0.0.1:8080" }, "own --listen port"},
		{"twice", func(c *Config) { c.Ports = []int{8080, 8080} }, "--port 8080 given twice"},
		{"listen garbled", func(c *Config) { c.Listen = "9091" }, "--listen \"9091\""},
		{"listen port garbled", func(c *Config) { c.Listen = ":http-alt" }, "--listen \":http-alt\": port must be"},
		{"interval 0", func(c *Config) { c.Interval = 0 }, "--interval (0s) must be between 1ms and 1m"},
		{"interval long", func(c *Config) { c.Interval = time.Hour }, "--interval (1h0m0s)"},
		{"max cpu 0", func(c *Config) { c.MaxCPU = 0 }, "--max-cpu (0) must be in (0, 1]"},
		{"max cpu 2", func(c *Config) { c.MaxCPU = 2 }, "--max-cpu (2)"},
		{"max cpu 1", func(c *Config) { c.MaxCPU = 1 }, ""},
		{"no pod", func(c *Config) { c.PodName = "" }, "--pod-name"},
		{"peers", func(c *Config) { c.MaxPeers = -1 }, "--max-peers (-1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// The polls keep --interval while a dump is short, and space out to hold
// --max-cpu when it is not.
func TestNextWait(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		interval time.Duration
		maxCPU   float64
		took     time.Duration
		want     time.Duration
	}{
		{10 * ms, 0.25, 0, 10 * ms},
		{10 * ms, 0.25, 1 * ms, 9 * ms},                                   // interval holds: 1 of 10 ms
		{10 * ms, 0.25, 2500 * time.Microsecond, 7500 * time.Microsecond}, // exactly a quarter
		{10 * ms, 0.25, 8 * ms, 24 * ms},                                  // a quarter: 8 ms on, 24 off
		{10 * ms, 1, 30 * ms, 0},                                          // a whole core: back to back
		{10 * ms, 0.5, 30 * ms, 30 * ms},
	} {
		if got := nextWait(tc.interval, tc.maxCPU, tc.took); got != tc.want {
			t.Errorf("nextWait(%s, %g, %s) = %s, want %s", tc.interval, tc.maxCPU, tc.took, got, tc.want)
		}
	}
}
