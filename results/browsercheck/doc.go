// Package browsercheck holds the test that opens the HTML reports
// (results.NewHTMLReporter and the compare and history pages) in headless
// Chromium, as a person sees them: Debian's chromium-headless-shell,
// which make deps installs, driven by chromedp over the DevTools protocol.
// It has no code of its own beside the test.
package browsercheck
