package nodeagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Termination-message limits of the kubelet (pkg/kubelet/container/runtime.go,
// MaxContainerTerminationMessageLength; kuberuntime_container.go,
// kubeContainerStatus… fallback to the last 80 log lines, at most 2 KiB).
const (
	maxTermMessage     = 4096
	maxTermLogFallback = 2048
	termLogLines       = 80
)

// proc is one started container process.
type proc struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed after exit is set
	exit    procExit
}

// procExit is how a container process ended.
type procExit struct {
	Code     int32
	Finished time.Time
}

// startProc starts the shim for spec with stdout and stderr appended to
// logPath. The shim is in its own process group, so SIGKILL reaches
// everything the container started.
func startProc(shimPath string, spec shimSpec, logPath string) (*proc, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open container log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(shimPath, ShimArg, string(b))
	cmd.Stdin = nil
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: shimCloneFlags,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start container shim %s: %w", shimPath, err)
	}
	p := &proc{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.exit = procExit{Code: exitCode(cmd.ProcessState, err), Finished: time.Now()}
		close(p.done)
	}()
	return p, nil
}

// exitCode is the container exit code a runtime reports: the status, or
// 128 + signal for a process killed by a signal (137 for SIGKILL).
func exitCode(ps *os.ProcessState, err error) int32 {
	if ps == nil {
		return 128
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 128
	}
	return int32(ps.ExitCode())
}

// signal sends sig to the container's main process (SIGTERM, like a
// runtime's StopContainer) or, for SIGKILL, to its whole process group.
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	if sig == syscall.SIGKILL {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		return
	}
	_ = p.cmd.Process.Signal(sig)
}

// readTail returns at most max bytes from the end of the file at path.
func readTail(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		if _, err := f.Seek(st.Size()-max, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// terminationMessage is a terminated container's message (kubelet,
// kuberuntime_container.go getTerminationMessage): the tail of its
// termination-message file, or with FallbackToLogsOnError and a failed,
// message-less exit, the last lines of its log.
func terminationMessage(termFile, logFile string, policy string, code int32) string {
	data, err := readTail(termFile, maxTermMessage)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Sprintf("Error on reading termination log %s: %v", termFile, err)
	}
	if len(data) > 0 || policy != "FallbackToLogsOnError" || code == 0 {
		return string(data)
	}
	logs, err := readTail(logFile, 64*1024)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(logs, "\n"), []byte("\n"))
	if len(lines) > termLogLines {
		lines = lines[len(lines)-termLogLines:]
	}
	out := bytes.Join(lines, []byte("\n"))
	if len(out) > maxTermLogFallback {
		out = out[len(out)-maxTermLogFallback:]
	}
	return string(out)
}
