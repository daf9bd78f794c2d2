package verify

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// checkTimeout bounds one read of a pod's port through the pod proxy.
const checkTimeout = time.Second

// checkPorts reads the check port of every pod that matters for the
// mechanism check and the startup attribution, every interval until ctx
// ends: pods with an address that have not answered yet (startup), and
// deleted pods until they are gone (shutdown).
func (t *tracker) checkPorts(ctx context.Context, cp CheckPort, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		var wg sync.WaitGroup
		for uid, p := range t.snapshot() {
			if p.ip == "" || !p.gone.IsZero() {
				continue
			}
			if p.deleted.IsZero() && !p.firstAnswer.IsZero() {
				continue // serving and not terminating: nothing to learn
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.checkOnce(ctx, uid, p.name, cp)
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkOnce reads pod's port once. Any HTTP answer of the app counts as
// answered; the API server's own error for a failed dial does not. An
// answer is stamped when it arrived, a failure when its request was sent:
// both the conservative side of the instant the listener changed.
func (t *tracker) checkOnce(ctx context.Context, uid types.UID, pod string, cp CheckPort) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	sent := t.clk.Now()
	body, err := t.client.CoreV1().Pods(t.ns).ProxyGet("http", pod, strconv.Itoa(int(cp.Port)), cp.Path, nil).DoRaw(ctx)
	now := t.clk.Now()
	if ctx.Err() != nil && err != nil && context.Cause(ctx) != context.DeadlineExceeded {
		return // stopping, not the pod's failure
	}
	if answeredByApp(err, body) {
		t.listen(uid, now, true, "")
		return
	}
	t.listen(uid, sent, false, err.Error())
}

// answeredByApp reports whether a pod-proxy read reached the app: no error,
// or an HTTP error status the app itself returned. The API server answers a
// failed dial to the pod with 503 and "error trying to reach service: dial
// tcp ...: connect: connection refused" (k8s.io/apimachinery
// pkg/util/proxy/upgradeaware.go, via the pod proxy's error responder), and
// a timed-out read is no answer either.
func answeredByApp(err error, body []byte) bool {
	if err == nil {
		return true
	}
	msg := strings.ToLower(err.Error() + " " + string(body))
	for _, s := range []string{"error trying to reach service", "dial tcp", "connection refused", "connection reset",
		"no route to host", "i/o timeout", "context deadline exceeded", "eof"} {
		if strings.Contains(msg, s) {
			return false
		}
	}
	// A status the app returned (404 on a path it does not serve, 503 from
	// its own readiness handler): it is listening.
	return true
}
