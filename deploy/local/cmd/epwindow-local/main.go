package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/epwindow/epwindow/deploy/local/kubeproxy"
	proxyapp "github.com/epwindow/epwindow/deploy/local/kubeproxy/app"
)

// usageHead is what `up --help` says before the flags, which upHelp
// prints from their definitions.
const usageHead = `usage: epwindow-local up --dir DIR [flags]

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the node
agent, kube-proxy and Skipper (--ingress: Traefik beside or instead of it;
--dns: CoreDNS; --haproxy: HAProxy), all on this machine; prints
"READY kubeconfig=... ingress=... routes=..." on stdout when the cluster is
usable; SIGINT or SIGTERM tears it all down. Component logs are written under DIR.

   # Traefik too, and CoreDNS with a 5 s TTL, for a DNS-client measurement:
   epwindow-local up --dir /tmp/x --ingress all --dns --dns-ttl 5s

Flags (--name value or --name=value; a switch alone, or --name=false):
`

// upHelp writes up's help: usageHead, then every flag with its meaning and
// default, generated from upFlags.
func upHelp(w io.Writer) {
	fmt.Fprint(w, usageHead)
	upFlags(&upConfig{}, new(string)).VisitAll(func(f *flag.Flag) {
		kind, meaning := flag.UnquoteUsage(f)
		words := strings.Fields(meaning)
		// A switch's false and an empty text are no default: the meaning
		// says what none does. The default stays on one line.
		if f.DefValue != "" && f.DefValue != "false" {
			words = append(words, "(default "+f.DefValue+")")
		}
		fmt.Fprintf(w, "  --%s", f.Name)
		if kind != "" {
			fmt.Fprintf(w, " %s", kind)
		}
		fmt.Fprintf(w, "\n%s\n", wrap(words, "      ", 100))
	})
}

// wrap joins words into lines of at most width columns (a longer word
// stands alone), each starting with indent.
func wrap(words []string, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range words {
		if line != indent && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

func main() {
	if handled := dispatchShim(); handled {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == kubeproxy.Arg {
		proxyapp.Main(os.Args[2:])
		return
	}
	if len(os.Args) == 2 && slices.Contains([]string{"-h", "-help", "--help", "help"}, os.Args[1]) {
		upHelp(os.Stdout)
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "up" {
		upHelp(os.Stderr)
		os.Exit(2)
	}
	cfg, err := parseUp(os.Args[2:])
	if errors.Is(err, flag.ErrHelp) {
		upHelp(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "epwindow-local up: %v (epwindow-local up --help lists the flags)\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = up(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "epwindow-local up:", err)
		os.Exit(1)
	}
}
