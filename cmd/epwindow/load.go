package main

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/load"
)

// Flags of epwindow load (--rate, --keepalive and the --load-* flags are
// measure's names).
const (
	flagLoadURL     = "url"
	flagGRPCURL     = "grpc-url"
	flagGRPCRate    = "grpc-rate"
	flagGRPCWait    = "grpc-wait-addrs"
	flagLoadHost    = "host"
	flagStatsListen = "stats-listen"
	flagDeadline    = "deadline"
	flagNodeName    = "node-name"
)

func loadCommand() *cli.Command {
	return &cli.Command{
		Name:  "load",
		Usage: "send load to one URL at a bounded rate until a deadline, serving per-pod statistics as JSON",
		UsageText: `epwindow load --url URL --rate R --deadline TIME|DURATION [options]

   # What an in-cluster runner of measure --in-cluster-load runs (POD_NAME, NODE_NAME from the downward API):
   epwindow load --url http://10.96.14.2:8080/ --rate 100 --deadline 17m30s --stats-listen :9090

   # Try it locally against a probe:
   epwindow probe --listen 127.0.0.1:8080 --pod-name demo &
   epwindow load --url http://127.0.0.1:8080/ --rate 50 --deadline 1m --stats-listen 127.0.0.1:9090 &
   curl -s 127.0.0.1:9090/stats             # last response per probe pod, failures by kind, skew, its clock`,
		Description: fmt.Sprintf(`Sends GET requests to --url, and only there, at --rate per second (at most %d),
on a fixed schedule, a new connection per request unless --keepalive; stops sending by itself
when --deadline passes (a duration counted on this machine's clock from the start, or an RFC 3339
time; at most %s ahead), then idles: /stats keeps its figures, /healthz answers 503, and
it exits 0 only when stopped (SIGTERM or Ctrl-C), so a pod's container is not restarted.

Serves on --stats-listen:
   GET /stats    JSON: per probe pod the first and last response on this
                 process's clock and the probe clock's offset against it; failures by kind
                 since the start; totals; and this process's clock as it answered
   GET /clock    {"time": ..., "unix_ns": ...}, like the probe's
   GET /healthz  200 while sending, 503 once idle

measure --in-cluster-load runs it in pods and reads these through the API server's pod proxy.`, load.MaxRate, load.MaxLifetime),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagLoadURL, Usage: "the one URL to send to (required): http(s)://, or dns:///NAME:PORT for unary gRPC calls through grpc-go's dns resolver and round_robin (its log in /stats)"},
			&cli.StringFlag{Name: flagLoadHost, Usage: "Host header to send"},
			&cli.Float64Flag{Name: measure.FlagRate, Usage: fmt.Sprintf("requests per second, above 0 and at most %d (required)", load.MaxRate)},
			&cli.StringFlag{Name: flagDeadline, Usage: "stop sending after this duration on this machine's clock, or at this RFC 3339 time, then idle (required)"},
			&cli.StringFlag{Name: flagStatsListen, Value: ":9090", Usage: "TCP address of the statistics endpoint"},
			&cli.BoolFlag{Name: measure.FlagKeepAlive, Usage: "reuse connections (default: a new connection per request, so every request is routed anew)"},
			&cli.DurationFlag{Name: flagLoadTimeout, Value: 5 * time.Second, Usage: "timeout of one request"},
			&cli.IntFlag{Name: flagLoadMaxConns, Usage: "most requests in flight; more are counted as dropped (default: rate × timeout)"},
			&cli.IntFlag{Name: measure.FlagStreams, Usage: "also hold this many long-lived streams to --url (events in /stats)"},
			&cli.StringFlag{Name: measure.FlagStreamProtocol, Usage: "websocket or grpc, with --streams"},
			&cli.StringFlag{Name: measure.FlagReconnect, Value: load.ReconnectGRPCDefault, Usage: "re-open policy of the streams: grpc-default, immediate, DUR±JITTER"},
			&cli.StringFlag{Name: flagGRPCURL, Usage: "also make unary gRPC calls to this dns:///NAME:PORT target (grpc-go's dns resolver, round_robin), beside --url: what it saw is grpc_client in /stats"},
			&cli.Float64Flag{Name: flagGRPCRate, Value: 20, Usage: "calls per second to --grpc-url"},
			&cli.IntFlag{Name: flagGRPCWait, Usage: "start the --grpc-url client only once DNS answers its name with this many addresses (grpc-go resolves again only when a connection is lost)"},
			&cli.StringFlag{Name: flagPodName, EnvVars: []string{"POD_NAME"}, Usage: "name reported in /stats"},
			&cli.StringFlag{Name: flagNodeName, EnvVars: []string{"NODE_NAME"}, Usage: "node reported in /stats"},
		},
		Action: runLoad,
	}
}

// loadConfig turns epwindow load's flags into a load.RunnerConfig, checked
// at now.
func loadConfig(c *cli.Context, now time.Time) (load.RunnerConfig, error) {
	cfg := load.RunnerConfig{
		Load: load.Config{URL: c.String(flagLoadURL), Host: c.String(flagLoadHost), Rate: c.Float64(measure.FlagRate),
			KeepAlive: c.Bool(measure.FlagKeepAlive), Timeout: c.Duration(flagLoadTimeout), MaxConns: c.Int(flagLoadMaxConns)},
		StatsListen: c.String(flagStatsListen),
		Pod:         c.String(flagPodName),
		Node:        c.String(flagNodeName),
	}
	if n := c.Int(measure.FlagStreams); n != 0 || c.String(measure.FlagStreamProtocol) != "" {
		rc, err := load.ParseReconnect(c.String(measure.FlagReconnect))
		if err != nil {
			return cfg, err
		}
		cfg.Streams = &load.StreamConfig{URL: cfg.Load.URL, Host: cfg.Load.Host, Protocol: c.String(measure.FlagStreamProtocol),
			Streams: n, Reconnect: rc}
	}
	if u := c.String(flagGRPCURL); u != "" {
		cfg.GRPC = &load.Config{URL: u, Rate: c.Float64(flagGRPCRate), Timeout: c.Duration(flagLoadTimeout)}
		cfg.GRPCWaitAddrs = c.Int(flagGRPCWait)
	}
	if s := c.String(flagDeadline); s != "" {
		d, err := load.ParseDeadline(s, now)
		if err != nil {
			return cfg, err
		}
		cfg.Deadline = d
	}
	return cfg, cfg.Validate(now)
}

func runLoad(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("epwindow load: takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	clk := clock.RealClock{}
	cfg, err := loadConfig(c, clk.Now())
	if err != nil {
		return cli.Exit("epwindow load: "+err.Error(), exitUsage)
	}
	log := slog.New(slog.NewJSONHandler(c.App.ErrWriter, nil))
	cfg.OnIdle = func(at time.Time) {
		log.Info("deadline passed: idle, sending nothing, serving /stats until stopped", "at", at)
	}
	err = load.RunRunner(c.Context, cfg, clk, func(a net.Addr) {
		log.Info("started", "url", cfg.Load.URL, "rate", cfg.Load.Rate, "deadline", cfg.Deadline, "stats", a.String())
	})
	if err != nil {
		return cli.Exit("epwindow load: "+err.Error(), exitFailure)
	}
	log.Info("stopped", "deadline_passed", !clk.Now().Before(cfg.Deadline))
	return nil
}
