package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// Port-forward timeouts of the kubelet's streaming server defaults
// (pkg/kubelet/apis/config/v1beta1: streamingConnectionIdleTimeout 4 h;
// cri-streaming DefaultConfig: StreamCreationTimeout 30 s).
const (
	portForwardIdle          = 4 * time.Hour
	portForwardStreamTimeout = 30 * time.Second
)

// portForward serves /portForward/{ns}/{pod}[/{uid}], the endpoint the API
// server's pods/portforward proxies to, with the kubelet's own stream
// handling (k8s.io/cri-streaming portforward.ServePortForward; SPDY and
// websocket). Each forwarded port is dialled at 127.0.0.1 inside the pod's
// network namespace, as container runtimes do.
func (a *agent) portForward(w http.ResponseWriter, r *http.Request) {
	ns, name, uid := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid")
	wk := a.findWorker(ns, name, uid)
	if wk == nil {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	nsPath := wk.netnsPath()
	if nsPath == "" {
		http.Error(w, "pod has no network namespace (not running)", http.StatusBadRequest)
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, netnsForwarder{nsPath: nsPath}, name, string(wk.uid), opts,
		portForwardIdle, portForwardStreamTimeout, portforward.SupportedProtocols)
}

// netnsForwarder copies a port-forward stream to a port on the pod's
// loopback.
type netnsForwarder struct{ nsPath string }

// PortForward implements portforward.PortForwarder.
func (f netnsForwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	var conn net.Conn
	err := inNetns(f.nsPath, func() error {
		var err error
		d := net.Dialer{Timeout: 10 * time.Second}
		conn, err = d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
		return err
	})
	if err != nil {
		return fmt.Errorf("dial port %d in the pod: %w", port, err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	_ = stream.Close()
	wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// findWorker returns the worker of a pod by namespace and name (and UID
// when given), or nil.
func (a *agent) findWorker(ns, name, uid string) *podWorker {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.workers {
		w.mu.Lock()
		p := w.latest
		w.mu.Unlock()
		if p != nil && p.Namespace == ns && p.Name == name && (uid == "" || string(p.UID) == uid) {
			return w
		}
	}
	return nil
}
