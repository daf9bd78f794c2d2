// Command loadbench drives epwindow's load generator (package measure/load)
// for hack/bench-load.sh and compares its figures with vegeta's.
//
//	loadbench run -url http://127.0.0.1:8080/ -rate 1000 -duration 10s -conns 100 -keepalive > epwindow.json
//	loadbench compare -mode keepalive -vegeta v1.json,v2.json -epwindow e1.json,e2.json
//
// "run" prints the generator's totals as JSON; "compare" reads rounds of
// those and of `vegeta report -type=json` (with "<user> <sys>" CPU seconds in
// FILE.cpu if present), and prints each round, the medians and the
// epwindow/vegeta ratios of the medians.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/measure/load"
)

// figures is what both tools are compared on.
type figures struct {
	Rate    float64 `json:"rate"`
	Sent    int64   `json:"sent"`
	OK      int64   `json:"ok"`
	Failed  int64   `json:"failed"`
	Dropped int64   `json:"dropped"`
	P50NS   int64   `json:"p50_ns"`
	P99NS   int64   `json:"p99_ns"`
	MaxNS   int64   `json:"max_ns"`
	// LagP50NS/LagP99NS: how late requests started after their scheduled
	// instant (epwindow only; vegeta does not report it).
	LagP50NS int64 `json:"lag_p50_ns,omitempty"`
	LagP99NS int64 `json:"lag_p99_ns,omitempty"`
	// CPU is user + system seconds the tool's process used (from the
	// script's `time`), not part of the JSON.
	CPU float64 `json:"-"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadbench run|compare [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:], os.Stdout)
	case "compare":
		err = compare(os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown subcommand %q: want run or compare", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	url := fs.String("url", "", "target URL")
	rate := fs.Float64("rate", 1000, "requests per second")
	duration := fs.Duration("duration", 10*time.Second, "how long to send")
	conns := fs.Int("conns", 100, "max requests (connections) in flight")
	keepAlive := fs.Bool("keepalive", true, "reuse connections")
	timeout := fs.Duration("timeout", 5*time.Second, "per-request timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	g, err := load.New(load.Config{URL: *url, Rate: *rate, KeepAlive: *keepAlive, MaxConns: *conns, Timeout: *timeout}, clock.RealClock{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	if err := g.Run(ctx); err != nil {
		return err
	}
	t := g.Totals()
	return json.NewEncoder(w).Encode(figures{
		Rate: t.Rate, Sent: t.Sent, OK: t.OK, Failed: t.Failed, Dropped: t.Dropped,
		P50NS: int64(t.LatencyP50), P99NS: int64(t.LatencyP99), MaxNS: int64(t.LatencyMax),
		LagP50NS: int64(t.LagP50), LagP99NS: int64(t.LagP99),
	})
}

// vegetaReport is the part of `vegeta report -type=json` used here
// (vegeta lib/metrics.go: Metrics, LatencyMetrics).
type vegetaReport struct {
	Latencies struct {
		P50 int64 `json:"50th"`
		P99 int64 `json:"99th"`
		Max int64 `json:"max"`
	} `json:"latencies"`
	Requests    int64          `json:"requests"`
	Rate        float64        `json:"rate"`
	Success     float64        `json:"success"`
	StatusCodes map[string]int `json:"status_codes"`
}

func compare(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	mode := fs.String("mode", "", "label of this comparison")
	vegetaPaths := fs.String("vegeta", "", "comma-separated `vegeta report -type=json` outputs, one per round")
	oursPaths := fs.String("epwindow", "", "comma-separated loadbench run outputs, one per round")
	header := fs.Bool("header", true, "print the column header")
	if err := fs.Parse(args); err != nil {
		return err
	}
	vs, es := strings.Split(*vegetaPaths, ","), strings.Split(*oursPaths, ",")
	if len(vs) != len(es) || *vegetaPaths == "" {
		return fmt.Errorf("-vegeta and -epwindow need the same number of rounds, at least one")
	}
	var vr, er []figures
	for i := range vs {
		var v vegetaReport
		if err := readJSON(vs[i], &v); err != nil {
			return err
		}
		vok := int64(float64(v.Requests)*v.Success + 0.5)
		vf := figures{Rate: v.Rate, Sent: v.Requests, OK: vok, Failed: v.Requests - vok,
			P50NS: v.Latencies.P50, P99NS: v.Latencies.P99, MaxNS: v.Latencies.Max, CPU: readCPU(vs[i])}
		var e figures
		if err := readJSON(es[i], &e); err != nil {
			return err
		}
		e.CPU = readCPU(es[i])
		vr, er = append(vr, vf), append(er, e)
	}
	us := func(ns int64) string { return time.Duration(ns).Round(time.Microsecond).String() }
	row := func(round, tool string, f figures) {
		cpu := "n/a"
		if f.CPU > 0 && f.Sent > 0 {
			cpu = fmt.Sprintf("%.0fµs", f.CPU/float64(f.Sent)*1e6)
		}
		fmt.Fprintf(w, "%-9s %-6s %-8s %9.1f %7d %6d %7d %9s %9s %9s %9s %9s\n", *mode, round, tool, f.Rate, f.Sent, f.Failed, f.Dropped,
			us(f.P50NS), us(f.P99NS), us(f.MaxNS), cpu, lag(f))
	}
	if *header {
		fmt.Fprintf(w, "%-9s %-6s %-8s %9s %7s %6s %7s %9s %9s %9s %9s %9s\n", "mode", "round", "tool", "rate/s", "sent", "failed", "dropped",
			"p50", "p99", "max", "cpu/req", "lag p99")
	}
	for i := range vr {
		row(fmt.Sprint(i+1), "vegeta", vr[i])
		row(fmt.Sprint(i+1), "epwindow", er[i])
	}
	vm, em := medianFigures(vr), medianFigures(er)
	if len(vr) > 1 {
		row("median", "vegeta", vm)
		row("median", "epwindow", em)
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	fmt.Fprintf(w, "%-9s epwindow/vegeta (medians of %d rounds): rate %s (goal ≥ 1.0×), latency p50 %s, p99 %s (goal ≤ 1.1×), cpu/req %s\n",
		*mode, len(vr), ratio(em.Rate, vm.Rate), ratio(float64(em.P50NS), float64(vm.P50NS)), ratio(float64(em.P99NS), float64(vm.P99NS)),
		ratio(em.CPU/float64(max(em.Sent, 1)), vm.CPU/float64(max(vm.Sent, 1))))
	return nil
}

// lag renders epwindow's schedule lag p99 (vegeta does not report one).
func lag(f figures) string {
	if f.LagP99NS == 0 {
		return "n/a"
	}
	return time.Duration(f.LagP99NS).Round(time.Microsecond).String()
}

// medianFigures takes each figure's median over the rounds on its own.
func medianFigures(fs []figures) figures {
	med := func(get func(figures) float64) float64 {
		xs := make([]float64, len(fs))
		for i, f := range fs {
			xs[i] = get(f)
		}
		sort.Float64s(xs)
		n := len(xs)
		if n%2 == 1 {
			return xs[n/2]
		}
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return figures{
		Rate:     med(func(f figures) float64 { return f.Rate }),
		Sent:     int64(med(func(f figures) float64 { return float64(f.Sent) })),
		Failed:   int64(med(func(f figures) float64 { return float64(f.Failed) })),
		Dropped:  int64(med(func(f figures) float64 { return float64(f.Dropped) })),
		P50NS:    int64(med(func(f figures) float64 { return float64(f.P50NS) })),
		P99NS:    int64(med(func(f figures) float64 { return float64(f.P99NS) })),
		MaxNS:    int64(med(func(f figures) float64 { return float64(f.MaxNS) })),
		LagP99NS: int64(med(func(f figures) float64 { return float64(f.LagP99NS) })),
		CPU:      med(func(f figures) float64 { return f.CPU }),
	}
}

// readCPU reads the "<user> <sys>" seconds the script's `time` wrote next
// to a result file (path + ".cpu"); 0 if there is none.
func readCPU(path string) float64 {
	b, err := os.ReadFile(path + ".cpu")
	if err != nil {
		return 0
	}
	var user, sys float64
	if _, err := fmt.Sscan(string(b), &user, &sys); err != nil {
		return 0
	}
	return user + sys
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
