package results

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// The power table of docs/compare.md ("What a run size can see") is this
// simulation's output, not figures typed in: the test renders the table,
// fails when the page's copy differs, and -update writes it there.
//
// The model: baseline windows lognormal around 1.5 s (the lognormal
// shape); in the new run each trial independently, with probability
// slow, gets 30 s more (a slow mode some deletions suffer: a controller
// that stalls now and then). Both runs have n trials and a 60 s hold, so a
// slow trial whose window passes it is cut there, as measure cuts it. A
// cell is the share of pairs whose window compare calls worse, out of
// powerPairs, with its exact (Clopper–Pearson) 95% interval: 300 pairs
// make the interval about ±5 points at 50%, narrow enough that a row a
// rule change moves by 10 points shows it. The first row is two runs of
// one setup: the false alarms of the window's tests.
const powerPairs = 300

var (
	powerSizes = []int{20, 40, 120}
	powerSlow  = []float64{0, 0.10, 0.20, 0.25, 0.30}
)

const (
	powerTableBegin = "<!-- power table: written by TestComparePowerTable (go test ./results -run TestComparePowerTable -update) -->"
	powerTableEnd   = "<!-- end of power table -->"
)

// powerCell is one cell: how many of the pairs called the window worse
// (worse), and better (better: only ever a false alarm here).
type powerCell struct{ worse, better int }

// powerRate runs the pairs of one cell on every CPU; each pair's seeds are
// fixed, so the count is the same whatever the scheduling.
func powerRate(n int, slow float64, row int) powerCell {
	var mu sync.Mutex
	var cell powerCell
	onEveryCPU(powerPairs, func(i int) {
		seed := uint64(700_000 + 10_000*row + 1000*n + 2*i)
		m, _ := Compare(windowRun(seed, n, lognormal, 0, 0), windowRun(seed+1, n, lognormal, slow, 30*time.Second), CompareOptions{}).Metric(PointWindow)
		mu.Lock()
		defer mu.Unlock()
		switch m.Verdict {
		case Worse:
			cell.worse++
		case Better:
			cell.better++
		}
	})
	return cell
}

// onEveryCPU calls f(0) … f(n−1), spread over the machine's cores: the
// seeded simulations' cases are independent, and each one's seeds are its
// own, so the results do not depend on the scheduling.
func onEveryCPU(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// certainRegression reports whether --max-regression 20% is breached for
// certain (not "cannot tell") on the window by comparison c of new run
// next.
func certainRegression(c *Comparison, next *Summary) bool {
	for _, b := range (Thresholds{MaxRegression: 0.2}).Check(next, c) {
		if b.Metric == PointWindow && b.Rule == "max-regression" && !b.CannotTell {
			return true
		}
	}
	return false
}

// clopperPearson is the exact two-sided 95% interval of a rate k/n.
func clopperPearson(k, n int) (lo, hi float64) {
	if k > 0 {
		lo = distuv.Beta{Alpha: float64(k), Beta: float64(n - k + 1)}.Quantile(0.025)
	}
	hi = 1
	if k < n {
		hi = distuv.Beta{Alpha: float64(k + 1), Beta: float64(n - k)}.Quantile(0.975)
	}
	return lo, hi
}

func TestComparePowerTable(t *testing.T) {
	cells := make([][]powerCell, len(powerSlow))
	var b strings.Builder
	b.WriteString("| the change (each trial independently) |")
	for _, n := range powerSizes {
		fmt.Fprintf(&b, " %d trials a run |", n)
	}
	b.WriteString("\n|---|")
	for range powerSizes {
		b.WriteString("--:|")
	}
	b.WriteString("\n")
	for r, slow := range powerSlow {
		if slow == 0 {
			b.WriteString("| none: two runs of one setup (false alarms) |")
		} else {
			fmt.Fprintf(&b, "| +30 s in %s of deletions |", pct(slow))
		}
		for _, n := range powerSizes {
			c := powerRate(n, slow, r)
			cells[r] = append(cells[r], c)
			k := c.worse
			if slow == 0 {
				k += c.better
			}
			lo, hi := clopperPearson(k, powerPairs)
			// The interval widened to whole tenths of a point, never narrowed.
			fmt.Fprintf(&b, " %s [%s, %s] |", pct(float64(k)/powerPairs), trimFloat(math.Floor(lo*1000+1e-9)/10), trimFloat(math.Ceil(hi*1000-1e-9)/10))
		}
		b.WriteString("\n")
	}
	table := b.String()
	t.Logf("window called worse (false alarms: worse or better), %d pairs a cell, 95%% intervals:\n%s", powerPairs, table)

	for j, n := range powerSizes {
		// Two runs of one setup: the window's tests run at half the family
		// error, so its false alarms must not be shown to exceed 5%.
		fa := cells[0][j].worse + cells[0][j].better
		if lo, _ := clopperPearson(fa, powerPairs); lo > FamilyError {
			t.Errorf("n=%d: %d of %d like pairs called changed: above %s beyond doubt", n, fa, powerPairs, pct(FamilyError))
		}
		// A slow mode only ever adds time: it is never an improvement.
		for r := 1; r < len(powerSlow); r++ {
			if c := cells[r][j]; c.better > 0 {
				t.Errorf("n=%d, +30 s in %s: %d pairs called better", n, pct(powerSlow[r]), c.better)
			}
		}
	}
	// The page's claim: SlowModeTrials catch a 10% slow mode 4 times in 5.
	for j, n := range powerSizes {
		if n == SlowModeTrials && float64(cells[1][j].worse) < 0.8*powerPairs {
			t.Errorf("n=%d: a 10%% slow mode called worse in %d of %d pairs, docs/compare.md says 4 in 5", n, cells[1][j].worse, powerPairs)
		}
	}

	checkDocTable(t, powerTableBegin, powerTableEnd, table)
}

// The cut-trials table of docs/compare.md: how many of a run's trials must
// be cut at the hold before compare calls the window worse. Baseline
// windows lognormal around 1.5 s; the new run's first k trials cut at its
// 60 s hold (seen at exactly the hold, as measure records a trial whose
// traffic never stopped), the rest drawn like the baseline's. A cell is
// the share of cutPairs pairs called worse; every pair called worse must
// also breach --max-regression 20% for certain (the size of a tail
// regression is where the tail moved: to at least the hold). 200 pairs
// make the interval about ±7 points at 50%.
const cutPairs = 200

var cutCounts = []int{1, 2, 3, 4, 5, 6, 7, 8, 10}

const (
	cutTableBegin = "<!-- cut table: written by TestCompareCutTrialsTable (go test ./results -run TestCompareCutTrialsTable -update) -->"
	cutTableEnd   = "<!-- end of cut table -->"
)

func TestCompareCutTrialsTable(t *testing.T) {
	var b strings.Builder
	b.WriteString("| trials a run |")
	for _, k := range cutCounts {
		fmt.Fprintf(&b, " %d cut |", k)
	}
	b.WriteString(" fewest cut called worse in ≥ 50% / ≥ 90% of pairs |\n|---|")
	for range cutCounts {
		b.WriteString("--:|")
	}
	b.WriteString("---|\n")
	for _, n := range []int{20, 40} {
		fmt.Fprintf(&b, "| %d |", n)
		half, most := "", ""
		for _, k := range cutCounts {
			var mu sync.Mutex
			worse := 0
			onEveryCPU(cutPairs, func(i int) {
				seed := uint64(900_000 + 10_000*k + 1000*n + 2*i)
				base := windowRun(seed, n, lognormal, 0, 0)
				cut := 0
				held := shape{name: "cut", hold: time.Minute, draw: func(rng *rand.Rand) time.Duration {
					if cut++; cut <= k {
						return time.Minute
					}
					return lognormal.draw(rng)
				}}
				nx := windowRun(seed+1, n, held, 0, 0)
				c := Compare(base, nx, CompareOptions{})
				if m, _ := c.Metric(PointWindow); m.Verdict != Worse {
					return
				}
				certain := certainRegression(c, nx)
				mu.Lock()
				defer mu.Unlock()
				worse++
				if !certain {
					t.Errorf("n=%d, %d cut, pair %d: worse but --max-regression 20%% not breached for certain", n, k, i)
				}
			})
			rate := float64(worse) / cutPairs
			fmt.Fprintf(&b, " %s |", pct(rate))
			if rate >= 0.5 && half == "" {
				half = fmt.Sprint(k)
			}
			if rate >= 0.9 && most == "" {
				most = fmt.Sprint(k)
			}
		}
		fmt.Fprintf(&b, " %s / %s |\n", cmp.Or(half, "more"), cmp.Or(most, "more"))
	}
	table := b.String()
	t.Logf("window called worse with k trials cut at the hold, %d pairs a cell:\n%s", cutPairs, table)
	checkDocTable(t, cutTableBegin, cutTableEnd, table)
}

// checkDocTable compares docs/compare.md's copy of a table between begin
// and end with table, or writes it there with -update.
func checkDocTable(t *testing.T, begin, end, table string) {
	t.Helper()
	const page = "../docs/compare.md"
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no table between %q and %q", page, begin, end)
	}
	i += len(begin) + 1
	if *update {
		if err := os.WriteFile(page, []byte(doc[:i]+table+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc[i:j] != table {
		t.Errorf("%s's table is not this simulation's (go test ./results -run %s -update):\n%s\nwant:\n%s", page, t.Name(), doc[i:j], table)
	}
}
