package main

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// timingPrefix is internal/localcluster's TimingPrefix (localcluster.go):
// "localcluster-timing: lock_wait=D start=D" when Start returns a cluster,
// "localcluster-timing: stop=D" when Shutdown has stopped one. This module
// does not import that one for a constant.
const timingPrefix = "localcluster-timing:"

// Package is one test package of one phase: its test binary's wall time
// and, when it started local clusters, where that time went.
type Package struct {
	Phase, Name string
	// Status is pass, fail or skip (no test files, or every test skipped),
	// as go test reports it.
	Status      string
	BuildFailed bool
	// Elapsed: the test binary's wall time, as go test's "ok" line gives it
	// (10 ms precision), without compiling and linking it.
	Elapsed time.Duration
	// Clusters counts local cluster starts; LockWait, Start and Stop sum
	// the localcluster-timing lines (tool clock of the test binary, ms).
	Clusters              int
	LockWait, Start, Stop time.Duration
	// Tests are the top-level tests that ended, with their own elapsed.
	Tests []Test
}

// Test is one top-level test's elapsed time.
type Test struct {
	Name    string
	Elapsed time.Duration
	Status  string
}

// TestTime is what the package's tests took with the clusters up: its
// wall time less the waiting, starts and stops; zero when it started no
// cluster.
func (p *Package) TestTime() time.Duration {
	if p.Clusters == 0 {
		return 0
	}
	return max(0, p.Elapsed-p.LockWait-p.Start-p.Stop)
}

// Summary collects packages from go test -json streams.
type Summary struct {
	open     map[string]*Package
	packages []*Package
	phase    string
}

// NewSummary starts a summary; events added are of phase until SetPhase.
func NewSummary(phase string) *Summary {
	return &Summary{open: map[string]*Package{}, phase: phase}
}

// SetPhase names the phase of the events added next.
func (s *Summary) SetPhase(phase string) { s.phase = phase }

// Add takes one event.
func (s *Summary) Add(e event) {
	if e.Package == "" {
		return
	}
	p := s.open[e.Package]
	if p == nil {
		p = &Package{Phase: s.phase, Name: shortName(e.Package)}
		s.open[e.Package] = p
	}
	switch {
	case e.Action == "output":
		p.addTiming(e.Output)
	case terminal(e.Action) && e.Test == "":
		p.Status = e.Action
		p.BuildFailed = e.FailedBuild != ""
		p.Elapsed = seconds(e.Elapsed)
		s.packages = append(s.packages, p)
		delete(s.open, e.Package)
	case terminal(e.Action) && !strings.Contains(e.Test, "/"):
		p.Tests = append(p.Tests, Test{Name: e.Test, Elapsed: seconds(e.Elapsed), Status: e.Action})
	}
}

// addTiming adds a localcluster-timing line's durations.
func (p *Package) addTiming(line string) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), timingPrefix)
	if !ok {
		return
	}
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		d, err := time.ParseDuration(v)
		if err != nil {
			continue
		}
		switch k {
		case "lock_wait":
			p.LockWait += d
		case "start":
			p.Start += d
			p.Clusters++
		case "stop":
			p.Stop += d
		}
	}
}

// Close ends the summary: a package whose stream stopped before its end
// (go test killed) is kept as failed, with no wall time.
func (s *Summary) Close() {
	for _, p := range s.open {
		p.Status = "fail"
		s.packages = append(s.packages, p)
	}
	clear(s.open)
	slices.SortStableFunc(s.packages, func(a, b *Package) int {
		return cmp.Or(cmp.Compare(b.Elapsed, a.Elapsed), cmp.Compare(a.Phase, b.Phase), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range s.packages {
		slices.SortStableFunc(p.Tests, func(a, b Test) int { return cmp.Compare(b.Elapsed, a.Elapsed) })
	}
}

// Packages are the closed summary's packages, slowest first.
func (s *Summary) Packages() []*Package { return s.packages }

func seconds(f float64) time.Duration {
	return time.Duration(f * float64(time.Second)).Round(time.Millisecond)
}

// readFiles reads saved streams; each file's name without .json is its
// phase.
func readFiles(paths []string) (*Summary, error) {
	s := NewSummary("")
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		s.SetPhase(phaseName(path))
		if err := addStream(s, bytes.NewReader(b)); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	s.Close()
	return s, nil
}

// addStream adds every event of r.
func addStream(s *Summary, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if e, ok := decodeEvent(sc.Bytes()); ok {
			s.Add(e)
		}
	}
	return sc.Err()
}

// phaseName is a stream file's name without its directory and .json.
func phaseName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".json")
}
