// Package censored holds the end-to-end test of trials cut at --hold: on a
// local cluster whose ingress (Skipper) polls the API server less often than
// the hold lasts, measure's trials run into the hold, are counted as
// censored, and the recommendation becomes a lower bound (exit 6). It has no
// non-test code.
package censored
