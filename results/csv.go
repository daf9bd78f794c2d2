package results

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// csvHeader is the fixed header of the CSV layout: one row per trial and
// stage instance, the trial's fields repeated on each of its rows (a trial
// without stages gets one row with the stage columns empty).
var csvHeader = []string{
	"trial", "pod", "node", "pod_ip", "valid", "invalid_reason", "t0",
	"skew_ns", "skew_uncertainty_ns", "client_failures",
	"stage", "key", "at", "offset_ns", "uncertainty_ns", "clock", "reasons",
	"new_pod", "new_pod_ip", "startup_failures", "startup_note",
}

// csvOptional are the columns a reader does without: files written before
// they existed lack them ("reasons": schema 2, as a JSON array; the
// replacement pod's startup columns).
var csvOptional = map[string]bool{"reasons": true,
	"new_pod": true, "new_pod_ip": true, "startup_failures": true, "startup_note": true}

// NewCSVEncoder returns an Encoder that writes the CSV layout, its header
// before the first record, flushing after every record.
func NewCSVEncoder(w io.Writer) Encoder {
	cw := csv.NewWriter(w)
	wroteHeader := false
	return func(r *Record) error {
		if !wroteHeader {
			if err := cw.Write(csvHeader); err != nil {
				return fmt.Errorf("write csv header: %w", err)
			}
			wroteHeader = true
		}
		base := []string{
			strconv.Itoa(r.Trial), r.Pod, r.Node, r.PodIP, strconv.FormatBool(r.Valid), r.Invalid,
			formatTime(r.T0), strconv.FormatInt(r.SkewNS, 10), strconv.FormatInt(r.SkewUncertaintyNS, 10),
			formatCounts(r.ClientFailures),
		}
		reasons := ""
		if len(r.Reasons) > 0 {
			b, err := json.Marshal(r.Reasons)
			if err != nil {
				return fmt.Errorf("write trial %d: %w", r.Trial, err)
			}
			reasons = string(b)
		}
		later := []string{r.NewPod, r.NewPodIP, formatCounts(r.StartupFailures), r.StartupNote}
		if len(r.Stages) == 0 {
			if err := cw.Write(append(append(base, "", "", "", "", "", "", reasons), later...)); err != nil {
				return fmt.Errorf("write trial %d: %w", r.Trial, err)
			}
		}
		for _, s := range r.Stages {
			row := append(slices.Clone(base), s.Name, s.Key, formatTime(s.At),
				strconv.FormatInt(s.OffsetNS, 10), strconv.FormatInt(s.UncertaintyNS, 10), string(s.Clock), reasons)
			row = append(row, later...)
			if err := cw.Write(row); err != nil {
				return fmt.Errorf("write trial %d: %w", r.Trial, err)
			}
		}
		cw.Flush()
		if err := cw.Error(); err != nil {
			return fmt.Errorf("write trial %d: %w", r.Trial, err)
		}
		if f, ok := w.(flusher); ok {
			return f.Flush()
		}
		return nil
	}
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// formatCounts renders {"refused":3,"reset":1} as "refused=3;reset=1".
func formatCounts(m map[string]int) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}

func parseCounts(s string) (map[string]int, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]int{}
	for _, kv := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("client_failures %q: want kind=count", kv)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("client_failures %q: %w", kv, err)
		}
		m[k] = n
	}
	return m, nil
}

// decodeCSV reads the CSV layout back into records, grouping consecutive
// rows of the same trial. Columns are found by header name, so extra
// columns are ignored.
func decodeCSV(br *bufio.Reader) (*File, error) {
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read csv header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, h := range csvHeader {
		if _, ok := col[h]; !ok && !csvOptional[h] {
			return nil, fmt.Errorf("not a results file: csv header lacks %q (want %s)", h, strings.Join(csvHeader, ","))
		}
	}
	f := &File{Format: FormatCSV}
	for line := 2; ; line++ {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("csv line %d: %w", line, err)
		}
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(row) {
				return row[i]
			}
			return ""
		}
		r, err := csvTrial(get)
		if err != nil {
			return nil, fmt.Errorf("csv line %d: %w", line, err)
		}
		if n := len(f.Trials); n == 0 || f.Trials[n-1].Trial != r.Trial || f.Trials[n-1].Pod != r.Pod || !f.Trials[n-1].T0.Equal(r.T0) {
			f.Trials = append(f.Trials, r)
		}
		if get("stage") == "" {
			continue
		}
		s, err := csvStage(get)
		if err != nil {
			return nil, fmt.Errorf("csv line %d: %w", line, err)
		}
		last := &f.Trials[len(f.Trials)-1]
		last.Stages = append(last.Stages, s)
	}
	return f, nil
}

func csvTrial(get func(string) string) (Record, error) {
	r := Record{Kind: KindTrial, Pod: get("pod"), Node: get("node"), PodIP: get("pod_ip"), Invalid: get("invalid_reason")}
	var err error
	if r.Trial, err = strconv.Atoi(get("trial")); err != nil {
		return r, fmt.Errorf("trial: %w", err)
	}
	if r.Valid, err = strconv.ParseBool(get("valid")); err != nil {
		return r, fmt.Errorf("valid: %w", err)
	}
	if r.T0, err = parseTime(get("t0")); err != nil {
		return r, fmt.Errorf("t0: %w", err)
	}
	if r.SkewNS, err = parseInt(get("skew_ns")); err != nil {
		return r, fmt.Errorf("skew_ns: %w", err)
	}
	if r.SkewUncertaintyNS, err = parseInt(get("skew_uncertainty_ns")); err != nil {
		return r, fmt.Errorf("skew_uncertainty_ns: %w", err)
	}
	if r.ClientFailures, err = parseCounts(get("client_failures")); err != nil {
		return r, err
	}
	if v := get("reasons"); v != "" {
		if err := json.Unmarshal([]byte(v), &r.Reasons); err != nil {
			return r, fmt.Errorf("reasons: %w", err)
		}
	}
	r.NewPod, r.NewPodIP, r.StartupNote = get("new_pod"), get("new_pod_ip"), get("startup_note")
	if r.StartupFailures, err = parseCounts(get("startup_failures")); err != nil {
		return r, err
	}
	return r, nil
}

func csvStage(get func(string) string) (Stage, error) {
	s := Stage{Name: get("stage"), Key: get("key"), Clock: Clock(get("clock"))}
	var err error
	if s.At, err = parseTime(get("at")); err != nil {
		return s, fmt.Errorf("at: %w", err)
	}
	if s.OffsetNS, err = parseInt(get("offset_ns")); err != nil {
		return s, fmt.Errorf("offset_ns: %w", err)
	}
	if s.UncertaintyNS, err = parseInt(get("uncertainty_ns")); err != nil {
		return s, fmt.Errorf("uncertainty_ns: %w", err)
	}
	return s, nil
}

func parseInt(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
