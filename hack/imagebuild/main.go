// Command imagebuild writes epwindow's image archive; `make image` runs it.
// It is a build tool, not part of the epwindow CLI.
//
//	go run ./hack/imagebuild -binary bin/image/epwindow -o bin/epwindow-image.tar -tag epwindow:latest
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/epwindow/epwindow/internal/imagebuild"
)

// tags collects repeated -tag flags.
type tags []string

func (t *tags) String() string     { return strings.Join(*t, ",") }
func (t *tags) Set(v string) error { *t = append(*t, v); return nil }

func main() {
	var (
		opts imagebuild.Options
		out  string
		ts   tags
		ver  string
	)
	flag.StringVar(&opts.Binary, "binary", "", "static linux epwindow binary (CGO_ENABLED=0 GOOS=linux)")
	flag.StringVar(&opts.Arch, "arch", "", "image architecture (default: the binary's)")
	flag.StringVar(&out, "o", "bin/epwindow-image.tar", "archive to write")
	flag.Var(&ts, "tag", "image tag, repeatable (e.g. epwindow:latest)")
	flag.StringVar(&ver, "version", "", "org.opencontainers.image.version label")
	flag.Parse()
	if opts.Binary == "" || len(ts) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: imagebuild -binary FILE -tag NAME:TAG [-tag ...] [-o FILE]")
		os.Exit(2)
	}
	opts.Labels = map[string]string{
		"org.opencontainers.image.title":  "epwindow",
		"org.opencontainers.image.source": "https://github.com/epwindow/epwindow",
	}
	if ver != "" {
		opts.Labels["org.opencontainers.image.version"] = ver
	}
	img, err := imagebuild.Build(opts)
	if err == nil {
		err = imagebuild.WriteArchive(out, img, ts...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
	d, _ := img.Digest()
	fmt.Printf("wrote %s (%s), image %s\n", out, strings.Join(ts, ", "), d)
}
