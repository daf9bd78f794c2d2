package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// Flags go anywhere, as in kubectl: interspersed puts them where Go's flag
// package reads them, and takes each value from the flag's definition, so
// a value is never mistaken for a positional argument nor the other way
// round.
func TestInterspersed(t *testing.T) {
	flags := []cli.Flag{
		&cli.BoolFlag{Name: "watch"},
		&cli.BoolFlag{Name: "all-namespaces", Aliases: []string{"A"}},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}},
		&cli.StringFlag{Name: "url"},
		&cli.DurationFlag{Name: "timeout"},
		&cli.StringSliceFlag{Name: "max-p99"},
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"flags first already", []string{"-n", "shop", "checkout"}, []string{"-n", "shop", "--", "checkout"}},
		{"flags after the positional", []string{"checkout", "-n", "shop", "--url", "http://x"},
			[]string{"-n", "shop", "--url", "http://x", "--", "checkout"}},
		{"flags on both sides", []string{"-n", "shop", "checkout", "--url", "http://x", "--watch"},
			[]string{"-n", "shop", "--url", "http://x", "--watch", "--", "checkout"}},
		{"a bool flag takes no value", []string{"--watch", "checkout"}, []string{"--watch", "--", "checkout"}},
		{"a short bool flag takes no value", []string{"-A", "dir"}, []string{"-A", "--", "dir"}},
		{"a bool flag's explicit value", []string{"--watch=false", "checkout"}, []string{"--watch=false", "--", "checkout"}},
		{"a value that looks like a positional", []string{"a.jsonl", "--namespace", "b.jsonl", "c.jsonl"},
			[]string{"--namespace", "b.jsonl", "--", "a.jsonl", "c.jsonl"}},
		{"a value that looks like a flag", []string{"--namespace", "--watch", "checkout"},
			[]string{"--namespace", "--watch", "--", "checkout"}},
		{"--flag=value form", []string{"checkout", "--url=http://x", "--timeout=3m"},
			[]string{"--url=http://x", "--timeout=3m", "--", "checkout"}},
		{"a repeated value flag", []string{"a", "--max-p99", "window=3s", "b", "--max-p99", "slice_not_ready=1s"},
			[]string{"--max-p99", "window=3s", "--max-p99", "slice_not_ready=1s", "--", "a", "b"}},
		{"-- ends the flags", []string{"--watch", "--", "--url", "-n"}, []string{"--watch", "--", "--url", "-n"}},
		{"-- between positionals", []string{"a", "--", "b", "--watch"}, []string{"--", "a", "b", "--watch"}},
		{"- is standard input", []string{"-", "--namespace", "x"}, []string{"--namespace", "x", "--", "-"}},
		{"an unknown flag stays a flag, without a value", []string{"checkout", "--nope", "v"},
			[]string{"--nope", "--", "checkout", "v"}},
		{"a value flag at the end keeps missing its value", []string{"checkout", "--url"}, []string{"--url", "--", "checkout"}},
		{"no positional: no --", []string{"--url", "http://x", "--watch"}, []string{"--url", "http://x", "--watch"}},
		{"nothing", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := interspersed(flags, tc.args); !slices.Equal(got, tc.want) {
				t.Errorf("interspersed(%q)\n got %q\nwant %q", tc.args, got, tc.want)
			}
		})
	}
}

// parsed is what one command line parsed into, through the real app with
// its actions replaced.
type parsed struct {
	command string
	ctx     *cli.Context
}

// parseOnly parses argv (program name first) with the real app, every
// subcommand's Action replaced by one that only records what it was given:
// nothing runs, nothing connects. The error is the parser's (an unknown
// flag, a missing value, an unknown subcommand).
func parseOnly(argv []string) (parsed, error) {
	app := newApp("epwindow")
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	app.ExitErrHandler = func(*cli.Context, error) {}
	var p parsed
	app.Action = func(c *cli.Context) error {
		if c.NArg() > 0 {
			return &unknownCommand{c.Args().First()}
		}
		return nil
	}
	for _, cmd := range app.Commands {
		cmd.Action = func(c *cli.Context) error {
			p = parsed{command: cmd.Name, ctx: c}
			return nil
		}
	}
	err := runCLI(context.Background(), app, argv)
	return p, err
}

type unknownCommand struct{ name string }

func (e *unknownCommand) Error() string { return "unknown subcommand " + e.name }

// The issue's own example: verify with the Deployment before its flags,
// and the other subcommands with flags after their files.
func TestFlagsAfterPositionals(t *testing.T) {
	p, err := parseOnly(strings.Fields("epwindow verify -n shop checkout --url http://ingress.example.internal " +
		"--host checkout.example.com --method POST --rate 200 --watch"))
	if err != nil {
		t.Fatal(err)
	}
	c := p.ctx
	if p.command != "verify" || c.Args().Slice()[0] != "checkout" || c.NArg() != 1 {
		t.Fatalf("verify parsed to %s %q", p.command, c.Args().Slice())
	}
	for flag, want := range map[string]string{"namespace": "shop", "url": "http://ingress.example.internal",
		"host": "checkout.example.com", "method": "POST"} {
		if got := c.String(flag); got != want {
			t.Errorf("--%s = %q, want %q", flag, got, want)
		}
	}
	if c.Int("rate") != 200 || !c.Bool("watch") {
		t.Errorf("--rate %d --watch %v, want 200 true", c.Int("rate"), c.Bool("watch"))
	}

	p, err = parseOnly([]string{"epwindow", "report", "run.jsonl", "--format", "markdown"})
	if err != nil || p.ctx.String("format") != "markdown" || !slices.Equal(p.ctx.Args().Slice(), []string{"run.jsonl"}) {
		t.Errorf("report run.jsonl --format markdown: %v, format %q, args %q", err, p.ctx.String("format"), p.ctx.Args().Slice())
	}
	p, err = parseOnly([]string{"epwindow", "compare", "a.jsonl", "--max-p99", "window=3s", "b.jsonl"})
	if err != nil || !slices.Equal(p.ctx.Args().Slice(), []string{"a.jsonl", "b.jsonl"}) ||
		!slices.Equal(p.ctx.StringSlice("max-p99"), []string{"window=3s"}) {
		t.Errorf("compare a --max-p99 window=3s b: %v, args %q", err, p.ctx.Args().Slice())
	}
	// "--" ends the flags: a file named like a flag stays a file.
	p, err = parseOnly([]string{"epwindow", "report", "--format", "json", "--", "--odd-name.jsonl"})
	if err != nil || !slices.Equal(p.ctx.Args().Slice(), []string{"--odd-name.jsonl"}) {
		t.Errorf("report -- --odd-name.jsonl: %v, args %q", err, p.ctx.Args().Slice())
	}
	// An unknown flag after a positional is still refused, by name.
	if _, err := parseOnly([]string{"epwindow", "report", "run.jsonl", "--no-such-flag"}); err == nil ||
		!strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("report run.jsonl --no-such-flag: err %v, want one naming the flag", err)
	}
}

// Shell completion asks with a last "--generate-bash-completion", which
// urfave/cli ignores after a "--": such a request is passed on untouched.
func TestFlagsFirstLeavesCompletionAlone(t *testing.T) {
	argv := []string{"epwindow", "report", "run.jsonl", "--format", completionFlag}
	if got := flagsFirst(newApp("epwindow"), argv); !slices.Equal(got, argv) {
		t.Errorf("flagsFirst(%q) = %q", argv, got)
	}
}
