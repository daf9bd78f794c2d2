package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/sidecar"
)

func runSidecarArgs(t *testing.T, ctx context.Context, args ...string) error {
	t.Helper()
	app := &cli.App{Name: "epwindow", Commands: []*cli.Command{sidecarCommand()}, Writer: &strings.Builder{}, ErrWriter: &strings.Builder{}}
	app.ExitErrHandler = func(*cli.Context, error) {}
	return app.RunContext(ctx, append([]string{"epwindow", "sidecar"}, args...))
}

// Bad input exits 2 naming the flag, before anything listens.
func TestSidecarRefuses(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "--port is required"},
		{[]string{"--port", "0"}, "--port 0: must be 1-65535"},
		{[]string{"--port", "70000"}, "--port 70000"},
		{[]string{"--port", "http"}, "port"},
		{[]string{"--port", "9091"}, "--port 9091 is the sidecar's own --listen port"},
		{[]string{"--port", "8080", "--port", "8080"}, "--port 8080 given twice"},
		{[]string{"--port", "8080", "--interval", "0s"}, "--interval (0s)"},
		{[]string{"--port", "8080", "--interval", "often"}, "interval"},
		{[]string{"--port", "8080", "--listen", "9091"}, "--listen \"9091\""},
		{[]string{"--port", "8080", "--max-peers", "-1"}, "--max-peers (-1)"},
		{[]string{"--port", "8080", "--max-cpu", "0"}, "--max-cpu (0)"},
	} {
		err := runSidecarArgs(t, context.Background(), tt.args...)
		ec, ok := err.(cli.ExitCoder)
		if !ok || ec.ExitCode() != exitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want exit %d naming %q", tt.args, err, exitUsage, tt.want)
		}
	}
}

// Every flag reaches its field.
func TestSidecarConfigFromFlags(t *testing.T) {
	var cfg sidecar.Config
	var cfgErr error
	cmd := sidecarCommand()
	cmd.Action = func(c *cli.Context) error { cfg, cfgErr = sidecarConfig(c); return nil }
	app := &cli.App{Name: "epwindow", Commands: []*cli.Command{cmd}}
	if err := app.Run([]string{"epwindow", "sidecar", "--port", "8080", "--port", "8443", "--interval", "5ms", "--max-cpu", "0.5",
		"--listen", ":9200", "--pod-name", "shop-1", "--max-peers", "64", "--termination-log", "/tmp/x"}); err != nil {
		t.Fatal(err)
	}
	if cfgErr != nil {
		t.Fatal(cfgErr)
	}
	want := sidecar.Config{Ports: []int{8080, 8443}, Interval: 5 * time.Millisecond, MaxCPU: 0.5, Listen: ":9200", PodName: "shop-1",
		MaxPeers: 64, TerminationLog: "/tmp/x"}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config %+v\nwant   %+v", cfg, want)
	}
}

// The command runs until its context ends, then writes the record: here
// at once, against this machine's real sockets.
func TestSidecarRunsAndWritesRecord(t *testing.T) {
	_, closeDump, err := sidecar.KernelDumper()
	if err != nil {
		t.Skipf("no socket reader here: %v", err)
	}
	closeDump()
	path := filepath.Join(t.TempDir(), "termination-log")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runSidecarArgs(t, ctx, "--port", "8080", "--listen", "127.0.0.1:0", "--pod-name", "p", "--termination-log", path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := sidecar.ParseTimeline(b)
	if err != nil || tl.Pod != "p" || tl.Sigterm == nil || tl.Poll.Polls < 2 || tl.Poll.Errors != 0 {
		t.Errorf("record %s: %v", b, err)
	}
}
