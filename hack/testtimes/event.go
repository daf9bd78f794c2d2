package main

import (
	"encoding/json"
	"strings"
	"time"
)

// event is one line of `go test -json`: cmd/test2json's TestEvent, and the
// build events go test adds (ImportPath, FailedBuild; `go help test`,
// "-json").
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64 // seconds
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string
}

// decodeEvent reads one line; ok is false for a line that is not a JSON
// event (go test prints a few errors as text, such as a package pattern
// that matches nothing).
func decodeEvent(line []byte) (e event, ok bool) {
	if len(line) == 0 || line[0] != '{' {
		return event{}, false
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return event{}, false
	}
	return e, e.Action != ""
}

// terminal says whether the action ends a test or a package.
func terminal(action string) bool {
	return action == "pass" || action == "fail" || action == "skip"
}

// shortName drops the tool module's path, which every package of the
// repository's three modules starts with.
func shortName(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/epwindow/epwindow/")
}
