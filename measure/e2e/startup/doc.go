// Package startup holds the end-to-end tests of the startup side of the
// window (a replacement pod from its creation to its first request) on the
// real local cluster, with Skipper's poll injected at two values. It has no
// non-test code.
package startup
