package child

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWaitReadyFailsWhenTheChildExits(t *testing.T) {
	p, err := Start(exec.Command("false"))
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(context.Background(), "x", "x.log", 10*time.Millisecond, 10*time.Second, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "x exited while starting (see x.log)") {
		t.Errorf("WaitReady = %v, want the exit named", err)
	}
}

func TestWaitReadyTimesOutAndStops(t *testing.T) {
	p, err := Launch("sleep", []string{"30"}, filepath.Join(t.TempDir(), "sleep.log"))
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(context.Background(), "sleep", "sleep.log", 10*time.Millisecond, 100*time.Millisecond, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "not ready after 100ms") {
		t.Errorf("WaitReady = %v, want a timeout", err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("a child that never got ready is still running")
	}
	p2, err := Launch("sleep", []string{"30"}, filepath.Join(t.TempDir(), "sleep.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.WaitReady(context.Background(), "sleep", "sleep.log", 10*time.Millisecond, time.Second, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	p2.Stop() // SIGTERM ends sleep
	if p2.Err() == nil {
		t.Error("a SIGTERMed sleep exited cleanly")
	}
}

func TestRetry(t *testing.T) {
	calls := 0
	_, err := Retry(context.Background(), 3, func() (int, error) { calls++; return 0, errors.New("port taken") })
	if calls != 3 || err == nil {
		t.Errorf("3 failures: %d calls, %v", calls, err)
	}
	calls = 0
	v, err := Retry(context.Background(), 3, func() (int, error) {
		calls++
		if calls < 2 {
			return 0, errors.New("port taken")
		}
		return 7, nil
	})
	if v != 7 || err != nil || calls != 2 {
		t.Errorf("second try: %d, %v after %d calls", v, err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	if _, err := Retry(ctx, 3, func() (int, error) { calls++; return 0, context.Canceled }); err == nil || calls != 1 {
		t.Errorf("ended context: %d calls, %v", calls, err)
	}
}

// A child's environment is PATH and what its caller adds, nothing of this
// process's: the user's KUBECONFIG and proxy variables stay out.
func TestLaunchEnvironment(t *testing.T) {
	t.Setenv("KUBECONFIG", "/home/someone/.kube/config")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	t.Setenv("EPWINDOW_TEST_MARKER", "x")
	log := filepath.Join(t.TempDir(), "env.log")
	p, err := Launch("env", nil, log, "SSL_CERT_FILE=/tmp/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Err() != nil {
		t.Fatal(p.Err())
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(b))
	want := []string{"PATH=" + SystemPath, "SSL_CERT_FILE=/tmp/ca.crt"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("child environment %q, want exactly %q", got, want)
	}
}
