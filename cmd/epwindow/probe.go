package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/probe"
)

// Probe flag names.
const (
	flagListen            = "listen"
	flagListenDelay       = "listen-delay"
	flagPodName           = "pod-name"
	flagHold              = "hold"
	flagExitOnSigterm     = "exit-on-sigterm"
	flagReadyAfterSigterm = "ready-after-sigterm"
	flagIgnoreSigterm     = "ignore-sigterm"
	flagRefuseOnSigterm   = "refuse-on-sigterm"
	flagClockOffset       = "clock-offset"
	flagTerminationLog    = "termination-log"
	flagMaxPeers          = "max-peers"
	flagShutdownTimeout   = "shutdown-timeout"
	flagStreamDrain       = "stream-drain"
	flagStreamInterval    = "stream-interval"
	flagMaxStreamRecords  = "max-stream-records"
	flagGRPCListen        = "grpc-listen"
	flagGRPCMaxConnAge    = "grpc-max-connection-age"
	flagGRPCMaxConnGrace  = "grpc-max-connection-age-grace"
)

func probeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "serve as the measured pod and record the last connection and request that reach it",
		UsageText: `epwindow probe [options]

   # What a probe Deployment's container runs (POD_NAME from the downward API):
   epwindow probe --listen :8080 --hold 90s

   # Try it locally:
   epwindow probe --listen 127.0.0.1:8080 --pod-name demo --termination-log /tmp/demo.json &
   curl -i 127.0.0.1:8080/                    # 200, body "pod=demo time=<unix ns>"
   kill -TERM %1                              # keeps serving; /healthz now answers 503
   curl -s 127.0.0.1:8080/timeline            # the record so far, JSON
   curl -X POST 127.0.0.1:8080/release        # ends the hold: drain, write /tmp/demo.json, exit 0`,
		Description: `The probe answers every traffic request with 200 and one line, its pod name and
its wall clock in unix ns ("pod=NAME time=UNIXNS"; its control endpoints say the
same in the headers X-Epwindow-Pod and X-Epwindow-Time), and records accepts and
requests — in total, per peer IP (capped by --max-peers), and after SIGTERM —
in bounded memory.

Control endpoints, counted apart from traffic:
   GET  /healthz   200 until SIGTERM, then 503 (the kubelet marks the pod not Ready)
   GET  /timeline  the record as JSON (versioned; instants RFC 3339 ns)
   GET  /clock     {"time": ..., "unix_ns": ...}
   GET  /prestop   the preStop httpGet target: stamps prestop_called;
                   ?sleep=5s sleeps before answering
   POST /release   ends the hold

Streams, counted as traffic and recorded one by one in /timeline:
   GET  /stream    WebSocket: a text message "POD SEQ UNIXNS" every --stream-interval
   gRPC            /epwindow.v1.Streams/Watch over h2c on the same port
                   (Empty in, StringValue messages out, header x-epwindow-pod)
--stream-drain says how they end when the pod terminates.

On SIGTERM or SIGINT it keeps accepting and serving until POST /release or
until --hold has passed, then drains in-flight requests (up to
--shutdown-timeout), writes the record (at most 4096 bytes) to
--termination-log and exits 0; a termination log it cannot write is logged,
never fatal. A second signal stops it at once (the record is still written).
--exit-on-sigterm instead closes the listener at SIGTERM: the fast-exiting app
that causes 502s during rollouts. --listen-delay opens the listener only
after a while, like an app that loads its configuration first: until then
the port refuses connections, /healthz included, so a readiness probe keeps
the pod out of the Service and, without one, the pod is routed to before it
listens. --ignore-sigterm stamps SIGTERM and keeps serving (and ready)
until the kubelet's SIGKILL: the app that exits 137. --clock-offset is
fault injection: it shifts
every instant the probe reports, to test skew correction.

It writes nothing but the termination log, so it runs as non-root with a
read-only root filesystem. Logs are JSON lines on stderr, one per state change
(started, prestop, sigterm, released, hold expired, exit).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagListen, Value: probe.DefaultListen, Usage: "TCP address to serve on"},
			&cli.DurationFlag{Name: flagListenDelay, Usage: "open the listener only after this long (an app loading its configuration); until then connections and readiness probes are refused"},
			&cli.StringFlag{Name: flagPodName, EnvVars: []string{"POD_NAME"}, Usage: "name reported in responses and the record (default: the host name)"},
			&cli.DurationFlag{Name: flagHold, Value: probe.DefaultHold, Usage: "how long to keep serving after SIGTERM unless released by POST /release"},
			&cli.BoolFlag{Name: flagExitOnSigterm, Usage: "close the listener at SIGTERM and exit without holding (the incident's app)"},
			&cli.BoolFlag{Name: flagRefuseOnSigterm, Usage: "close the listener at SIGTERM (new connections refused) and exit after --hold: the app that stops accepting while it drains, its address still routed"},
			&cli.BoolFlag{Name: flagIgnoreSigterm, Usage: "stamp SIGTERM and otherwise ignore it (keep serving, stay ready) until SIGKILL: the app that exits 137 at the end of the grace period"},
			&cli.BoolFlag{Name: flagReadyAfterSigterm, Usage: "keep /healthz at 200 after SIGTERM"},
			&cli.DurationFlag{Name: flagClockOffset, Usage: "fault injection: add this (may be negative) to every instant reported"},
			&cli.StringFlag{Name: flagTerminationLog, Value: probe.DefaultTerminationLog, Usage: "file the record is written to at exit (empty: none)"},
			&cli.IntFlag{Name: flagMaxPeers, Value: probe.DefaultMaxPeers, Usage: "peer IP addresses recorded individually; further peers are only counted"},
			&cli.DurationFlag{Name: flagShutdownTimeout, Value: probe.DefaultShutdownTimeout, Usage: "how long in-flight requests may take to finish at exit"},
			&cli.StringFlag{Name: flagStreamDrain, Value: string(probe.DrainNone), Usage: "open WebSocket/gRPC streams at termination: none (reset at exit), close (at SIGTERM), close-jittered=DUR (spread over DUR), goaway (GOAWAY / 1001, streams end at exit)"},
			&cli.DurationFlag{Name: flagStreamInterval, Value: probe.DefaultStreamInterval, Usage: "period of the message on each open stream"},
			&cli.IntFlag{Name: flagMaxStreamRecords, Value: probe.DefaultMaxStreamRecords, Usage: "ended streams recorded individually in /timeline; older ones are only counted"},
			&cli.StringFlag{Name: flagGRPCListen, Usage: "also serve gRPC (Hello, Watch) on this TCP address with grpc-go's own server, so --grpc-max-connection-age applies (empty: only on --listen, over h2c)"},
			&cli.DurationFlag{Name: flagGRPCMaxConnAge, Usage: "grpc-go MaxConnectionAge on the --grpc-listen port: GOAWAY to each connection at this age (±10%), so DNS clients re-resolve (0: never)"},
			&cli.DurationFlag{Name: flagGRPCMaxConnGrace, Usage: "grpc-go MaxConnectionAgeGrace: how long calls may go on after that GOAWAY before the connection is closed (0: no limit)"},
		},
		Action: runProbe,
	}
}

// probeConfig turns the probe's flags into a probe.Config.
func probeConfig(c *cli.Context) (probe.Config, error) {
	cfg := probe.Config{
		Listen:            c.String(flagListen),
		ListenDelay:       c.Duration(flagListenDelay),
		PodName:           c.String(flagPodName),
		Hold:              c.Duration(flagHold),
		ExitOnSigterm:     c.Bool(flagExitOnSigterm),
		IgnoreSigterm:     c.Bool(flagIgnoreSigterm),
		RefuseOnSigterm:   c.Bool(flagRefuseOnSigterm),
		ReadyAfterSigterm: c.Bool(flagReadyAfterSigterm),
		ClockOffset:       c.Duration(flagClockOffset),
		TerminationLog:    c.String(flagTerminationLog),
		MaxPeers:          c.Int(flagMaxPeers),
		ShutdownTimeout:   c.Duration(flagShutdownTimeout),
		StreamInterval:    c.Duration(flagStreamInterval),
		MaxStreamRecords:  c.Int(flagMaxStreamRecords),
		GRPCListen:        c.String(flagGRPCListen),

		GRPCMaxConnectionAge:      c.Duration(flagGRPCMaxConnAge),
		GRPCMaxConnectionAgeGrace: c.Duration(flagGRPCMaxConnGrace),
	}
	drain, err := probe.ParseStreamDrain(c.String(flagStreamDrain))
	if err != nil {
		return cfg, err
	}
	cfg.StreamDrain = drain
	name, err := podNameOrHost(cfg.PodName)
	if err != nil {
		return cfg, err
	}
	cfg.PodName = name
	return cfg, cfg.Validate()
}

// podNameOrHost is --pod-name (or POD_NAME), else the host name: a pod's
// is its name. The probe and the sidecar both name their pod so.
func podNameOrHost(name string) (string, error) {
	if name != "" {
		return name, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no --pod-name or POD_NAME, and no host name: %w", err)
	}
	return host, nil
}

func runProbe(c *cli.Context) error {
	cfg, err := probeConfig(c)
	if err != nil {
		return cli.Exit(fmt.Sprintf("epwindow probe: %v", err), exitUsage)
	}
	log := slog.New(slog.NewJSONHandler(c.App.ErrWriter, nil))

	// main's signal-aware context is cancelled by the first SIGTERM, but for
	// the probe SIGTERM starts the hold, it does not stop anything. So the
	// probe handles SIGTERM and SIGINT itself: the first one (or main's
	// cancellation, should a signal arrive before this Notify) starts the
	// hold; a second signal stops the probe at once. With --ignore-sigterm
	// every SIGTERM is ignored and only SIGINT stops it (SIGKILL, the
	// kubelet's, needs no handling).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancel(context.WithoutCancel(c.Context))
	defer stop()
	sigterm := make(chan struct{})
	go func() {
		parent := c.Context.Done()
		termed := false
		term := func() {
			if !termed {
				termed = true
				close(sigterm)
			}
		}
		// One signal reaches both sigs and main's context; only sigs counts.
		for n := 0; ; {
			select {
			case <-ctx.Done():
				return
			case <-parent:
				parent = nil
				term()
			case sig := <-sigs:
				if cfg.IgnoreSigterm {
					if sig == os.Interrupt {
						stop()
						return
					}
					term()
					continue
				}
				if n++; n == 1 {
					term()
				} else {
					stop()
					return
				}
			}
		}
	}()
	if err := probe.Run(ctx, cfg, sigterm, log); err != nil {
		return cli.Exit(fmt.Sprintf("epwindow probe: %v", err), exitFailure)
	}
	return nil
}
