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
// instants always stay. The stream log keeps its counts and, in the room the
// peers leave, Ends: the latest stream ends since SIGTERM (EndsDropped counts
// the older ones left out).
func TerminationMessage(tl Timeline) ([]byte, error) {
	all := tl.Peers
	var ends []StreamEnd
	if tl.Streams != nil {
		counts := *tl.Streams
		if tl.Sigterm != nil {
			ends = counts.ends(*tl.Sigterm)
		}
		counts.Records, counts.Ends, counts.EndsDropped = nil, nil, 0
		tl.Streams = &counts
	}
	render := func(peers, kept int) ([]byte, bool, error) {
		t := tl
		t.Peers = all[:peers:peers]
		if peers == 0 {
			t.Peers = nil
		}
		t.PeersOmitted = tl.PeersOmitted + len(all) - peers
		if t.Streams != nil && len(ends) > 0 {
			s := *t.Streams
			s.Ends = ends[len(ends)-kept:]
			if kept == 0 {
				s.Ends = nil
			}
			s.EndsDropped = len(ends) - kept
			t.Streams = &s
		}
		b, err := json.Marshal(t)
		return b, err == nil && len(b) <= MaxTerminationMessage, err
	}
	// Binary search for the most that fit (fits(lo) unknown, fits(hi)
	// false): 1024 peers would otherwise mean 1024 encodings at exit.
	most := func(hi int, fits func(int) ([]byte, bool)) []byte {
		lo := 0
		var best []byte
		for lo < hi {
			mid := (lo + hi) / 2
			if b, ok := fits(mid); ok {
				best, lo = b, mid+1
			} else {
				hi = mid
			}
		}
		return best
	}
	b, ok, err := render(len(all), len(ends))
	if err != nil {
		return nil, fmt.Errorf("encode probe timeline: %w", err)
	}
	if ok {
		return b, nil
	}
	// Every peer that fits without stream ends, then the ends that fit
	// beside them.
	peers := len(all)
	if _, ok, _ := render(peers, 0); !ok {
		best := most(len(all), func(n int) ([]byte, bool) { b, ok, _ := render(n, 0); return b, ok })
		if best == nil {
			return nil, errors.New("probe timeline does not fit the 4096-byte termination message even without peers (is --pod-name too long?)")
		}
		return best, nil
	}
	best := most(len(ends), func(n int) ([]byte, bool) { b, ok, _ := render(peers, n); return b, ok })
	if best == nil { // not even zero ends: cannot be, render(peers, 0) fit
		return nil, errors.New("probe timeline does not fit the 4096-byte termination message")
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
