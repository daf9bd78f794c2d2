package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// MaxTerminationMessage is the kubelet's limit on a container's termination
// message: 4096 bytes (pkg/kubelet/container/runtime.go,
// MaxContainerTerminationMessageLength). The kubelet keeps only the last
// 4096 bytes of a longer file (pkg/kubelet/kuberuntime/kuberuntime_container.go,
// tail.ReadAtMost), which would not be JSON.
const MaxTerminationMessage = 4096

// ParseTimeline decodes a Timeline as served at GET /timeline or written as
// the termination message, and rejects layouts it does not know.
func ParseTimeline(b []byte) (Timeline, error) {
	var tl Timeline
	if err := json.Unmarshal(b, &tl); err != nil {
		return Timeline{}, fmt.Errorf("decode probe timeline: %w", err)
	}
	if tl.Version != TimelineVersion {
		return Timeline{}, fmt.Errorf("probe timeline version %d, this epwindow reads version %d", tl.Version, TimelineVersion)
	}
	return tl, nil
}

// TerminationMessage renders tl as JSON of at most MaxTerminationMessage
// bytes. Peers go first, the least recently active ones first (tl.Peers is
// ordered latest first), and PeersOmitted says how many went; the totals and
// instants always stay.
func TerminationMessage(tl Timeline) ([]byte, error) {
	all := tl.Peers
	if tl.Streams != nil {
		counts := *tl.Streams
		counts.Records = nil
		tl.Streams = &counts
	}
	fits := func(n int) ([]byte, bool, error) {
		t := tl
		t.Peers = all[:n:n]
		if n == 0 {
			t.Peers = nil
		}
		t.PeersOmitted = tl.PeersOmitted + len(all) - n
		b, err := json.Marshal(t)
		return b, err == nil && len(b) <= MaxTerminationMessage, err
	}
	b, ok, err := fits(len(all))
	if err != nil {
		return nil, fmt.Errorf("encode probe timeline: %w", err)
	}
	if ok {
		return b, nil
	}
	// Binary search for the most peers that fit: 1024 peers would otherwise
	// mean 1024 encodings at exit.
	lo, hi := 0, len(all) // fits(lo) unknown yet, fits(hi) false
	var best []byte
	for lo < hi {
		mid := (lo + hi) / 2
		b, ok, _ := fits(mid)
		if ok {
			best, lo = b, mid+1
		} else {
			hi = mid
		}
	}
	if best == nil {
		return nil, errors.New("probe timeline does not fit the 4096-byte termination message even without peers (is --pod-name too long?)")
	}
	return best, nil
}

// WriteTerminationLog writes tl's termination message to path (the
// container's terminationMessagePath). The file is opened for writing only,
// never created in a new directory: with a read-only root filesystem the
// kubelet's bind-mounted file is the only writable path.
func WriteTerminationLog(path string, tl Timeline) error {
	b, err := TerminationMessage(tl)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write termination message (--termination-log): %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write termination message to %s (--termination-log): %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write termination message to %s (--termination-log): %w", path, err)
	}
	return nil
}
