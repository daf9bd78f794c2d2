// Command epwindow measures a Kubernetes cluster's propagation window: how long
// a deleted pod's address is still routed to, stage by stage.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version is stamped at link time: -ldflags "-X main.version=...".
var version = "dev"

func newApp(name string) *cli.App {
	app := &cli.App{
		Name:    name,
		Usage:   "measure how long a deleted pod is still routed to, and the preStop that covers it",
		Version: version,
		Commands: []*cli.Command{
			// One constructor per subcommand, each in its own file.
			measureCommand(),
			probeCommand(),
			sidecarCommand(),
			loadCommand(),
			manifestsCommand(),
			reportCommand(),
			compareCommand(),
			historyCommand(),
			lintCommand(),
			policyCommand(),
			verifyCommand(),
			completionCommand(),
		},
		EnableBashCompletion: true,
	}
	app.BashComplete = completer(func() ([]*cli.Command, []cli.Flag) { return app.Commands, app.Flags })
	for _, cmd := range app.Commands {
		if cmd.BashComplete == nil {
			cmd.BashComplete = completer(func() ([]*cli.Command, []cli.Flag) { return cmd.Subcommands, cmd.Flags })
		}
	}
	renameExamples(app.Commands, name)
	return app
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runCLI(ctx, newApp(appName(os.Args[0])), os.Args)
	stop()
	if err != nil {
		// cli.Exit errors are handled (printed, exit code) by the app itself.
		fmt.Fprintln(os.Stderr, "epwindow:", err)
		os.Exit(exitFailure)
	}
}
