// Command benchschedule prints what one run of the in-cluster schedule
// costs (issue 29's footprint): it starts the local cluster, applies
// `epwindow manifests --schedule` (a CronJob every minute, -trials
// deletions through Skipper's Service, --observer none), waits for the
// first run to succeed, and prints that run's own footprint line (API
// requests by kind, per trial and per minute, measure's peak RSS and CPU,
// as measure prints it from inside its pod), its duration, and its peak
// RSS against the 150 MB goal of docs/production-size.md. The CronJob's
// pod is the same binary as a laptop run, so the figures compare with
// hack/bench-footprint.sh's.
//
// Needs bin/epwindow-local (make cluster), bin/epwindow and root. make
// bench runs it; about 3 minutes.
//
//	go run ./hack/benchschedule [-trials 10]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/internal/kubeapply"
	"github.com/epwindow/epwindow/internal/localcluster"
)

const (
	ns      = "epwindow-bench-schedule"
	rssGoal = 150e6 // bytes: docs/production-size.md
)

func main() {
	trials := flag.Int("trials", 10, "deletions the scheduled run times (the schedule's default)")
	flag.Parse()
	if err := run(*trials); err != nil {
		fmt.Fprintln(os.Stderr, "benchschedule:", err)
		os.Exit(1)
	}
}

func run(trials int) error {
	bin, err := localcluster.BinDir()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	if c.IngressInClusterURL == "" {
		return fmt.Errorf("the local cluster names no ingress-in-cluster URL")
	}
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "epwindow"), "manifests", "--schedule", "* * * * *",
		"--namespace", ns, "--trials", strconv.Itoa(trials), "--ingress-class", "skipper", "--image", "epwindow:latest",
		"--", "--url", c.IngressInClusterURL, "--observer", "none").Output()
	if err != nil {
		return fmt.Errorf("epwindow manifests --schedule: %w", err)
	}
	if err := kubeapply.Create(ctx, c.Config, out); err != nil {
		return err
	}
	fmt.Printf("==> the schedule applied: a run of %d deletions every minute; waiting for the first to succeed\n", trials)
	for {
		jobs, err := c.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, j := range jobs.Items {
			if j.Status.Failed > 0 {
				return fmt.Errorf("scheduled run %s failed (logs under %s)", j.Name, filepath.Join(c.Dir, "nodes", "pods"))
			}
			if j.Status.Succeeded > 0 && j.Status.StartTime != nil && j.Status.CompletionTime != nil {
				return report(c, j.Name, j.Status.CompletionTime.Sub(j.Status.StartTime.Time), trials)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no scheduled run succeeded: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

var rssRE = regexp.MustCompile(`peak RSS ([0-9.]+) MiB`)

// report prints the footprint line the run's measure wrote to its log (the
// node agent keeps each container's output under DIR/nodes/pods).
func report(c *localcluster.Cluster, job string, took time.Duration, trials int) error {
	logs, err := filepath.Glob(filepath.Join(c.Dir, "nodes", "pods", ns+"_"+job+"-*", "measure.log"))
	if err != nil || len(logs) == 0 {
		return fmt.Errorf("the log of run %s: %v (none found)", job, err)
	}
	f, err := os.Open(logs[0])
	if err != nil {
		return err
	}
	defer f.Close()
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "footprint: ") {
			line = sc.Text()
		}
	}
	if line == "" {
		return fmt.Errorf("run %s printed no footprint line (%s)", job, logs[0])
	}
	fmt.Printf("\n== footprint of one scheduled run (%d trials, in its pod, %d cores) ==\n%s\n", trials, runtime.NumCPU(), line)
	fmt.Printf("run took %s, Job start to completion\n", took.Round(time.Second))
	if m := rssRE.FindStringSubmatch(line); m != nil {
		mib, _ := strconv.ParseFloat(m[1], 64)
		verdict := "met"
		if mib*1048576 > rssGoal {
			verdict = "NOT met"
		}
		fmt.Printf("peak RSS %.0f MiB: %.2fx the 150 MB goal (%s)\n", mib, mib*1048576/rssGoal, verdict)
	}
	return nil
}
