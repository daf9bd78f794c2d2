package browsercheck

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/epwindow/epwindow/results"
)

// chromium is Debian's headless Chromium (make deps installs it). Without
// it the test is skipped with a message on a developer's machine, and
// fails in CI (CI set): a check that never runs there checks nothing.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium-headless-shell")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium-headless-shell not on PATH in CI: run make deps")
		}
		t.Skip("chromium-headless-shell not on PATH: run make deps to check the HTML reports in a browser")
	}
	return path
}

// page is what the browser made of a report: a screenshot, the bounding
// box of each inline SVG, and the text a person can read.
type page struct {
	shot  []byte
	boxes []map[string]float64
	text  string
}

// open loads the HTML file at path in headless Chromium: only file://,
// with background networking off (chromedp's default flags), so nothing
// leaves the machine.
func open(t *testing.T, bin, path string) page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root on a CI machine; the page is our own file
		chromedp.WindowSize(1280, 1600),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var p page
	fail := func(err error) {
		if err != nil {
			t.Fatalf("headless Chromium on %s: %v", path, err)
		}
	}
	_, err := chromedp.Run(ctx, chromedp.Navigate("file://"+path))
	fail(err)
	_, err = chromedp.Run(ctx, chromedp.WaitReady("body"))
	fail(err)
	p.shot, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	fail(err)
	p.boxes, err = chromedp.Run(ctx, chromedp.Evaluate[[]map[string]float64](`Array.from(document.querySelectorAll("svg")).map(s => { const b = s.getBoundingClientRect(); return {width: b.width, height: b.height}; })`))
	fail(err)
	p.text, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	fail(err)
	return p
}

// notBlank reports whether a screenshot has enough drawn pixels: a page
// that failed to render is all white.
func notBlank(t *testing.T, shot []byte) bool {
	t.Helper()
	img, _, err := image.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot: %v", err)
	}
	b := img.Bounds()
	drawn := 0
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xE000 || g < 0xE000 || bl < 0xE000 {
				drawn++
			}
		}
	}
	return drawn > 500
}

// A run's HTML report as a person sees it in a browser: the page is not
// blank, the waterfall drew (its box has a size), and the text Chromium
// extracts holds the recommended preStop and each stage's p50 as the text
// report prints them.
func TestHTMLReportInChromium(t *testing.T) {
	bin := chromium(t)
	f, err := os.Open(filepath.Join("..", "testdata", "run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := results.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := results.Summarize(file, results.Options{})
	var b bytes.Buffer
	if err := results.NewHTMLReporter(s)(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.html")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p := open(t, bin, path)
	if _, err := png.DecodeConfig(bytes.NewReader(p.shot)); err != nil || !notBlank(t, p.shot) {
		t.Errorf("the screenshot is blank or no PNG (%v)", err)
	}
	if len(p.boxes) != 1 || p.boxes[0]["width"] < 400 || p.boxes[0]["height"] < 300 {
		t.Errorf("the waterfall's box %v: want one SVG drawn at least 400×300", p.boxes)
	}
	text := strings.Join(strings.Fields(p.text), " ")
	r := s.Doc().Recommendation
	var want []string
	want = append(want, fmt.Sprintf("seconds: %d", r.PreStopSeconds))
	var txt bytes.Buffer
	if err := results.NewTextReporter(s)(&txt); err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Doc().Stages {
		p50 := fmt.Sprintf("%.3fs", time.Duration(d.P50NS).Seconds())
		if d.Censored > 0 && d.Lower(0.5) {
			p50 = "≥" + p50
		}
		if !strings.Contains(txt.String(), p50) {
			t.Fatalf("the text report does not print %s's p50 as %s: the test's rendering is off", d.Name, p50)
		}
		want = append(want, d.Name+" "+fmt.Sprint(d.N)+" "+p50)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("the text Chromium extracts lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("page text:\n%s", p.text)
	}
}
