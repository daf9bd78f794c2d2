package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Encoder writes one trial record.
type Encoder func(*Record) error

// flusher is what bufio.Writer and http.ResponseWriter-like sinks offer.
type flusher interface{ Flush() error }

// writeLine writes v as one JSON line in a single Write, then flushes the
// sink if it buffers: a run killed between two records leaves a file whose
// every line is whole.
func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return err
	}
	if f, ok := w.(flusher); ok {
		return f.Flush()
	}
	return nil
}

// NewJSONEncoder returns an Encoder that writes each record as one JSON line
// and flushes it.
func NewJSONEncoder(w io.Writer) Encoder {
	return func(r *Record) error {
		r.Kind = KindTrial
		if err := writeLine(w, r); err != nil {
			return fmt.Errorf("write trial %d: %w", r.Trial, err)
		}
		return nil
	}
}

// Writer writes a results file as JSON lines: WriteHeader once, WriteTrial
// as each trial ends, WriteSummary at the end. Each record is one line,
// written and flushed on its own, so an interrupted run leaves a valid file
// that Decode reads as interrupted.
type Writer struct {
	w     io.Writer
	trial Encoder
}

// NewWriter returns a Writer over w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, trial: NewJSONEncoder(w)}
}

// WriteHeader writes the header record, stamping Kind and Schema.
func (w *Writer) WriteHeader(h *Header) error {
	h.Kind = KindHeader
	h.Schema = SchemaVersion
	if err := writeLine(w.w, h); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	return nil
}

// WriteTrial writes one trial record.
func (w *Writer) WriteTrial(r *Record) error { return w.trial(r) }

// WriteSummary writes the final summary record; its presence marks the run
// as complete.
func (w *Writer) WriteSummary(d *SummaryDoc) error {
	d.Kind = KindSummary
	if err := writeLine(w.w, d); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// Format names a results file layout.
type Format string

// The formats Decode detects.
const (
	FormatJSONLines Format = "jsonl"
	FormatCSV       Format = "csv"
)

// File is a decoded results file.
type File struct {
	Format  Format
	Header  *Header // nil when the file has none (CSV, or a bare trial stream)
	Trials  []Record
	Summary *SummaryDoc // nil when the run did not finish
	// Truncated is set when the last line was cut short (the writer was
	// killed mid-line); it was dropped.
	Truncated bool
}

// Interrupted reports whether the run behind a JSON-lines file ended early:
// it has no summary record, its summary says so, or its last line was cut.
// CSV files carry no summary, so they never count as interrupted.
func (f *File) Interrupted() bool {
	if f.Format != FormatJSONLines {
		return false
	}
	return f.Summary == nil || f.Summary.Interrupted || f.Truncated
}

// Decode reads a results file, detecting its format from the first
// non-blank byte: '{' is JSON lines, anything else CSV. It tolerates unknown
// fields and kinds (newer writers), a missing summary, and a cut last line;
// a malformed line elsewhere is an error naming its line number.
func Decode(r io.Reader) (*File, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		b, err := br.Peek(1)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errors.New("empty results file")
			}
			return nil, err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			if _, err := br.ReadByte(); err != nil {
				return nil, err
			}
			continue
		case '{':
			return decodeJSONLines(br)
		default:
			return decodeCSV(br)
		}
	}
}

func decodeJSONLines(br *bufio.Reader) (*File, error) {
	f := &File{Format: FormatJSONLines}
	var pending []byte // a malformed line: fatal unless it is the last
	pendingLine := 0
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read line %d: %w", n, err)
		}
		eof := err != nil
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			if pending != nil {
				return nil, fmt.Errorf("line %d: malformed record: %s", pendingLine, snippet(pending))
			}
			if derr := f.decodeLine(line); derr != nil {
				var syn *json.SyntaxError
				var typ *json.UnmarshalTypeError
				if errors.As(derr, &syn) || errors.As(derr, &typ) || errors.Is(derr, io.ErrUnexpectedEOF) {
					pending, pendingLine = line, n
				} else {
					return nil, fmt.Errorf("line %d: %w", n, derr)
				}
			}
		}
		if eof {
			break
		}
	}
	if pending != nil {
		f.Truncated = true
	}
	return f, nil
}

func (f *File) decodeLine(line []byte) error {
	kind, err := lineKind(line)
	if err != nil {
		return err
	}
	switch kind {
	case KindHeader:
		var h Header
		if err := json.Unmarshal(line, &h); err != nil {
			return err
		}
		if h.Schema > SchemaVersion {
			return fmt.Errorf("results schema %d is newer than this epwindow reads (%d): upgrade epwindow", h.Schema, SchemaVersion)
		}
		f.Header = &h
	case KindTrial, "":
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		r.Kind = KindTrial
		f.Trials = append(f.Trials, r)
	case KindSummary:
		var d SummaryDoc
		if err := json.Unmarshal(line, &d); err != nil {
			return err
		}
		f.Summary = &d
	default:
		// A kind a newer writer added: skip it.
	}
	return nil
}

// lineKind is a line's record kind. Every writer puts "kind" first (it is
// the first field of Header, Record and SummaryDoc, and encoding/json
// writes fields in order), so it is read from the prefix without decoding
// the line twice — a history's load spent a quarter of its time there;
// any other line is decoded for it. A line that is not JSON fails in the
// full decode that follows.
func lineKind(line []byte) (Kind, error) {
	const prefix = `{"kind":"`
	if rest, ok := bytes.CutPrefix(line, []byte(prefix)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return Kind(rest[:i]), nil
		}
	}
	var k struct {
		Kind Kind `json:"kind"`
	}
	if err := json.Unmarshal(line, &k); err != nil {
		return "", err
	}
	return k.Kind, nil
}

func snippet(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// Truncater is a results file WholeLines can cut back: an *os.File.
type Truncater interface {
	io.Writer
	Truncate(size int64) error
}

// WholeLines wraps a results file written from its start so that a write
// that fails part way — a full volume (ENOSPC) writes what fits, then
// fails — is cut back to the end of the last whole record, and every later
// write fails with that first error without writing: the file stays a
// valid results file of the records before the failure, which a summary
// written after the error cannot break by landing behind a cut line.
func WholeLines(f Truncater) io.Writer { return &wholeLines{f: f} }

type wholeLines struct {
	f   Truncater
	off int64 // end of the last whole write
	err error
}

func (w *wholeLines) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.f.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
		if terr := w.f.Truncate(w.off); terr != nil {
			w.err = errors.Join(err, fmt.Errorf("cut the results file back to its last whole record: %w", terr))
		}
		return 0, w.err
	}
	w.off += int64(n)
	return n, nil
}
