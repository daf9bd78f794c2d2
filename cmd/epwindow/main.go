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

func newApp() *cli.App {
	return &cli.App{
		Name:    "epwindow",
		Usage:   "measure how long a deleted pod is still routed to, and the preStop that covers it",
		Version: version,
		Commands: []*cli.Command{
			// One constructor per subcommand, each in its own file.
			measureCommand(),
			probeCommand(),
			loadCommand(),
			manifestsCommand(),
			reportCommand(),
			compareCommand(),
			lintCommand(),
			policyCommand(),
			verifyCommand(),
		},
		EnableBashCompletion: true,
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newApp().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		// cli.Exit errors are handled (printed, exit code) by the app itself.
		fmt.Fprintln(os.Stderr, "epwindow:", err)
		os.Exit(1)
	}
}
