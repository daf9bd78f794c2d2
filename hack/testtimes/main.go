// Command testtimes runs `go test -json` for make test and says where its
// time went (issue 45 item 1).
//
// `testtimes run -o FILE -- go test -json ...` runs the command, saves its
// JSON stream to FILE and prints what plain `go test` would: a line per
// package, build errors, and the whole output of every failed test (a
// passing test's logs stay in FILE). It exits with the command's status,
// or 1 if the command exited 0 but the stream reports a failure, so a
// failing test fails make test. When the command fails it also prints the
// per-package table of its own stream.
//
// `testtimes summary FILE...` prints every test package of the saved
// streams, slowest first: the wall time of its test binary (from start to
// exit, without compiling it) and, for a package whose tests start local
// clusters, how long it waited for another package's cluster to stop (the
// machine lock), started its clusters, ran its tests and stopped them, from
// the lines internal/localcluster writes (localcluster.TimingPrefix). The
// file name without .json names the phase.
//
// It does not time compiling and linking the test binaries: with go test
// -p 2 those overlap another package's run; hack/timed.sh times each
// phase as a whole.
//
//	go run ./hack/testtimes run -o bin/test-json/unit.json -- go test -json ./lint/
//	go run ./hack/testtimes summary bin/test-json/*.json
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "run":
		fs := flag.NewFlagSet("run", flag.ExitOnError)
		out := fs.String("o", "", "file to save the JSON stream to")
		fs.Parse(os.Args[2:])
		if *out == "" || fs.NArg() == 0 {
			usage()
		}
		os.Exit(runMain(os.Stdout, os.Stderr, *out, fs.Args()))
	case "summary":
		if len(os.Args) < 3 {
			usage()
		}
		s, err := readFiles(os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		if err := s.Report(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testtimes run -o FILE -- go test -json ARGS...\n       testtimes summary FILE...")
	os.Exit(2)
}

// runMain runs args, forwarding ^C and SIGTERM to it (go test then stops
// its test binaries, whose TestMain stops their clusters), and returns the
// exit status make test sees.
func runMain(stdout, stderr io.Writer, out string, args []string) int {
	f, err := os.Create(out)
	if err != nil {
		fmt.Fprintln(stderr, "testtimes:", err)
		return 1
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		f.Close()
		fmt.Fprintln(stderr, "testtimes:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		fmt.Fprintln(stderr, "testtimes:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sig {
			_ = cmd.Process.Signal(s)
		}
	}()
	res, copyErr := run(pipe, f, stdout, phaseName(out))
	waitErr := cmd.Wait()
	signal.Stop(sig)
	if err := f.Close(); copyErr == nil {
		copyErr = err
	}
	status := exitStatus(stderr, waitErr, copyErr, res)
	if status != 0 {
		_ = res.Summary.Report(stdout)
	}
	return status
}

// exitStatus is the command's own status when it failed; otherwise 1 when
// the stream could not be read or saved, or reports a failure.
func exitStatus(stderr io.Writer, waitErr, copyErr error, res runResult) int {
	var ee *exec.ExitError
	switch {
	case errors.As(waitErr, &ee) && ee.ExitCode() > 0:
		return ee.ExitCode()
	case waitErr != nil:
		fmt.Fprintln(stderr, "testtimes:", waitErr)
		return 1
	case copyErr != nil:
		fmt.Fprintln(stderr, "testtimes:", copyErr)
		return 1
	case res.Failed:
		fmt.Fprintln(stderr, "testtimes: the command exited 0 but its stream reports a failure")
		return 1
	}
	return 0
}
