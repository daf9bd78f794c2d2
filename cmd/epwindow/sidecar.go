package main

import (
	"fmt"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/sidecar"
)

// Sidecar flag names (--listen, --pod-name, --max-peers and
// --termination-log are the probe's, in probe.go).
const (
	flagPort     = "port"
	flagInterval = "interval"
	flagMaxCPU   = "max-cpu"
)

func sidecarCommand() *cli.Command {
	return &cli.Command{
		Name:  "sidecar",
		Usage: "run beside an app in its pod and record the last connection and data that reach the app's port",
		UsageText: `epwindow sidecar --port PORT [options]

   # What the native sidecar (an init container with restartPolicy: Always) runs
   # beside an app serving on 8080 (POD_NAME from the downward API):
   epwindow sidecar --port 8080

   # Try it locally, beside any server on 127.0.0.1:8080:
   epwindow sidecar --port 8080 --listen 127.0.0.1:9091 --pod-name demo --termination-log '' &
   curl -s 127.0.0.1:8080/ >/dev/null
   curl -s 127.0.0.1:9091/timeline        # last_accept, last_request, listener_closed, unseen_connections`,
		Description: `The sidecar shares the app's network namespace and needs no privilege: every
--interval it dumps the namespace's TCP sockets through NETLINK_SOCK_DIAG with
tcp_info, as any process there may, and keeps, per peer address, the last
connection it saw open on the app's --port(s) (TIME_WAIT included), the last
data received on them (tcp_info's last_data_recv), and when the app's
listener went away (listener_closed). A dump lists every socket of the
namespace, at about 1 µs each: --max-cpu caps their share of a core, spacing
the dumps out when the namespace holds many (TIME_WAIT included). Connections that open and go between two
dumps without a TIME_WAIT entry are counted, not seen: /proc/net/snmp's
PassiveOpens less the connections seen (unseen_connections).

The app's ports are given with --port (repeat it for several): it does not
read the pod's spec.

Endpoints, on --listen:
   GET /timeline   the record as JSON (versioned; instants RFC 3339 ns)
   GET /clock      {"time": ..., "unix_ns": ...}, as the probe's
   GET /healthz    200 once a socket dump has succeeded (a startupProbe)

On SIGTERM or SIGINT (a native sidecar's comes after the app has exited) it
dumps once more, writes the record (at most 4096 bytes) to --termination-log
and exits 0. It writes nothing else: it runs as non-root, with no
capabilities and a read-only root filesystem. See docs/sidecar.md.`,
		Flags: []cli.Flag{
			&cli.IntSliceFlag{Name: flagPort, Usage: "the app's TCP port to watch, 1-65535 (repeatable; required)"},
			&cli.DurationFlag{Name: flagInterval, Value: sidecar.DefaultInterval, Usage: "time between two socket dumps (1ms-1m): the resolution of last_accept and listener_closed"},
			&cli.Float64Flag{Name: flagMaxCPU, Value: sidecar.DefaultMaxCPU, Usage: "share of one core the socket dumps may take, in (0, 1]: past it the dumps space out beyond --interval (the record's max_gap_ns says by how much)"},
			&cli.StringFlag{Name: flagListen, Value: sidecar.DefaultListen, Usage: "TCP address the timeline is served on (not an app port)"},
			&cli.StringFlag{Name: flagPodName, EnvVars: []string{"POD_NAME"}, Usage: "name reported in the record (default: the host name)"},
			&cli.IntFlag{Name: flagMaxPeers, Value: sidecar.DefaultMaxPeers, Usage: "peer IP addresses recorded individually; further peers are only counted"},
			&cli.StringFlag{Name: flagTerminationLog, Value: probe.DefaultTerminationLog, Usage: "file the record is written to at exit (empty: none)"},
		},
		OnUsageError: usageError("sidecar"),
		Action:       runSidecar,
	}
}

// sidecarConfig turns the sidecar's flags into a sidecar.Config.
func sidecarConfig(c *cli.Context) (sidecar.Config, error) {
	cfg := sidecar.Config{
		Ports:          c.IntSlice(flagPort),
		Interval:       c.Duration(flagInterval),
		MaxCPU:         c.Float64(flagMaxCPU),
		Listen:         c.String(flagListen),
		PodName:        c.String(flagPodName),
		MaxPeers:       c.Int(flagMaxPeers),
		TerminationLog: c.String(flagTerminationLog),
	}
	name, err := podNameOrHost(cfg.PodName)
	if err != nil {
		return cfg, err
	}
	cfg.PodName = name
	return cfg, cfg.Validate()
}

func runSidecar(c *cli.Context) error {
	cfg, err := sidecarConfig(c)
	if err != nil {
		return cli.Exit(fmt.Sprintf("epwindow sidecar: %v", err), exitUsage)
	}
	log := slog.New(slog.NewJSONHandler(c.App.ErrWriter, nil))
	// main's context ends at the first SIGTERM or SIGINT: Run then dumps
	// once more and writes the termination log.
	if err := sidecar.Run(c.Context, cfg, log); err != nil {
		return cli.Exit(fmt.Sprintf("epwindow sidecar: %v", err), exitFailure)
	}
	return nil
}
