package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/measure/load"
)

// runLoadArgs runs epwindow load with args and returns its error (a
// cli.ExitCoder for the refusals).
func runLoadArgs(t *testing.T, args ...string) error {
	t.Helper()
	app := &cli.App{Name: "epwindow", Commands: []*cli.Command{loadCommand()}, Writer: &strings.Builder{}, ErrWriter: &strings.Builder{}}
	app.ExitErrHandler = func(*cli.Context, error) {}
	return app.Run(append([]string{"epwindow", "load"}, args...))
}

// Bad input exits 2 naming the flag, before anything is sent.
func TestLoadRefuses(t *testing.T) {
	base := []string{"--url", "http://127.0.0.1:1/", "--stats-listen", "127.0.0.1:0"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0", "--deadline", "1m"}, "--rate (0)"},
		{[]string{"--rate", "-3", "--deadline", "1m"}, "--rate (-3)"},
		{[]string{"--rate", "100000", "--deadline", "1m"}, "--rate (100000) must be at most"},
		{[]string{"--rate", "10"}, "--deadline is required"},
		{[]string{"--rate", "10", "--deadline", "soon"}, "--deadline \"soon\""},
		{[]string{"--rate", "10", "--deadline", "2001-01-01T00:00:00Z"}, "has passed"},
		{[]string{"--rate", "10", "--deadline", "48h"}, "more than 24h0m0s ahead"},
	} {
		err := runLoadArgs(t, append(base, tt.args...)...)
		ec, ok := err.(cli.ExitCoder)
		if !ok || ec.ExitCode() != exitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want exit %d naming %q", tt.args, err, exitUsage, tt.want)
		}
	}
}

// Every flag reaches its field; a duration deadline counts from now.
func TestLoadConfigFromFlags(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var cfg load.RunnerConfig
	var cfgErr error
	cmd := loadCommand()
	cmd.Action = func(c *cli.Context) error { cfg, cfgErr = loadConfig(c, now); return nil }
	app := &cli.App{Name: "epwindow", Commands: []*cli.Command{cmd}}
	if err := app.Run([]string{"epwindow", "load", "--url", "http://10.96.0.10:8080/", "--rate", "250", "--deadline", "90m",
		"--stats-listen", ":9191", "--keepalive", "--load-timeout", "2s", "--load-max-conns", "32", "--pod-name", "r-1", "--node-name", "n-1",
		"--host", "probe.local"}); err != nil {
		t.Fatal(err)
	}
	if cfgErr != nil {
		t.Fatal(cfgErr)
	}
	want := load.RunnerConfig{Load: load.Config{URL: "http://10.96.0.10:8080/", Host: "probe.local", Rate: 250, KeepAlive: true,
		Timeout: 2 * time.Second, MaxConns: 32}, StatsListen: ":9191", Deadline: now.Add(90 * time.Minute), Pod: "r-1", Node: "n-1"}
	if !reflect.DeepEqual(cfg, want) { // RunnerConfig holds a func (OnIdle): nil here
		t.Errorf("config %+v\nwant   %+v", cfg, want)
	}
}
