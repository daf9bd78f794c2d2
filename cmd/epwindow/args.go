package main

import (
	"context"
	"strings"

	"github.com/urfave/cli/v2"
)

// completionFlag is the flag urfave/cli's shell completion appends as the
// last argument (help.go, checkShellCompleteFlag); it ignores it after a
// "--", so a completion request is passed on untouched.
const completionFlag = "--generate-bash-completion"

// runCLI runs app on args with flags accepted anywhere, as kubectl accepts
// them: `epwindow verify -n shop checkout --url … --host …`. urfave/cli v2
// hands its command's arguments to Go's flag package, which stops at the
// first positional argument (flag.FlagSet.Parse), so the arguments are put
// in the order it reads: the subcommand's flags first, then "--", then the
// positional arguments in their order.
func runCLI(ctx context.Context, app *cli.App, args []string) error {
	return app.RunContext(ctx, flagsFirst(app, args))
}

// flagsFirst returns args (argv, program name first) with the named
// subcommand's flags moved ahead of its positional arguments. The
// subcommand is the first argument after the program's own flags; its own
// flag definitions say which flags take a value, so a value is never
// mistaken for a positional argument. Args without a known subcommand, and
// shell-completion requests, are returned as they are.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 || args[len(args)-1] == completionFlag {
		return args
	}
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" && args[i] != "--" {
		i += 1 + valueArgs(app.Flags, args[i])
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil || cmd.SkipFlagParsing || len(cmd.Subcommands) > 0 {
		return args
	}
	out := append([]string{}, args[:i+1]...)
	return append(out, interspersed(cmd.Flags, args[i+1:])...)
}

// interspersed reorders a subcommand's arguments as Go's flag package reads
// them: every flag (with its value, when it takes one) in its order, then,
// if there are positional arguments, "--" and the positional arguments in
// their order. A "--" in args ends the flags, as usual; "-" (standard
// input) is a positional argument. A flag the command does not define is
// kept among the flags, without a value, so that the parser names it.
func interspersed(flags []cli.Flag, args []string) []string {
	var named, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case a == "-" || !strings.HasPrefix(a, "-"):
			positional = append(positional, a)
		default:
			n := valueArgs(flags, a)
			end := min(i+1+n, len(args))
			named = append(named, args[i:end]...)
			i = end - 1
		}
	}
	if len(positional) == 0 {
		return named
	}
	return append(append(named, "--"), positional...)
}

// valueArgs is how many of the following arguments flag arg consumes: one
// for a defined flag that takes a value given as a separate argument
// ("--url X"), none for "--url=X", a boolean flag, or an unknown flag.
func valueArgs(flags []cli.Flag, arg string) int {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return 0
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			// Every urfave/cli v2 flag type says whether it takes a value
			// (flag.go, DocGenerationFlag); one that does not say is read
			// as taking one, as Go's flag package reads a non-bool flag.
			if v, ok := f.(interface{ TakesValue() bool }); ok && !v.TakesValue() {
				return 0
			}
			return 1
		}
	}
	return 0
}
