package e2etest

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// InterruptAt starts cmd, sends it SIGINT at the first stderr line that
// contains match (measure's progress lines, e.g. "1/5 trial: "), and waits
// for it to exit. It returns whether the signal was sent, the exit code
// and stderr. stderr is read to EOF before Wait, which exec.Cmd requires
// (Wait closes the pipe); a command that never prints match is killed
// after timeout.
func InterruptAt(t testing.TB, cmd *exec.Cmd, match string, timeout time.Duration) (sent bool, code int, log string) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The reader owns buf until readDone closes.
	interrupted := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			buf.WriteString(line + "\n")
			if !signalled && strings.Contains(line, match) {
				_ = cmd.Process.Signal(syscall.SIGINT)
				signalled = true
				close(interrupted)
			}
		}
	}()
	select {
	case <-interrupted:
	case <-readDone:
		// stderr closed without match: the process ended on its own.
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
	}
	<-readDone
	err = cmd.Wait()
	select {
	case <-interrupted:
		sent = true
	default:
	}
	return sent, ExitCode(err), buf.String()
}
