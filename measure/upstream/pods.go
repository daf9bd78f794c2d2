package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// endpoint is one controller replica to read over HTTP: a base URL (no
// trailing slash), or the reason it cannot be read at this poll.
type endpoint struct {
	Replica string
	BaseURL string
	Err     error
	// Hint is added to a failed read's error: how the replica is reached
	// and which flag changes it.
	Hint string
}

// source yields the replicas an HTTP observer reads at each poll.
type source interface {
	endpoints(ctx context.Context) ([]endpoint, error)
	// containers returns each replica's controller container, for Settings
	// (its command line) and Version (its image); nil when the replicas are
	// plain URLs.
	containers(ctx context.Context) []corev1.Container
	close() error
}

// urlSource is a fixed list of URLs, one per replica (--observer-url).
type urlSource []string

func (s urlSource) endpoints(context.Context) ([]endpoint, error) {
	eps := make([]endpoint, len(s))
	for i, u := range s {
		eps[i] = endpoint{Replica: u, BaseURL: strings.TrimRight(u, "/")}
	}
	return eps, nil
}

func (urlSource) containers(context.Context) []corev1.Container { return nil }
func (urlSource) close() error                                  { return nil }

// podSource finds the controller's pods by label selector and reaches each
// one's in-pod port through the API server's port-forward (the port may be
// bound to the pod's localhost, like ingress-nginx's status port and
// Contour's Envoy admin, so the pod IP would not do). Forwards are kept
// across polls and rebuilt when they break or the pod changes.
type podSource struct {
	client    kubernetes.Interface
	config    *rest.Config
	namespace string // "" = all namespaces
	selector  string
	port      int
	// portFlag is the flag that sets port, for error messages.
	portFlag string
	// whereFlag, when set, is the one flag that names other replicas
	// instead of --controller-selector and --controller-namespace (the DNS
	// observer's --dns-server), for error messages.
	whereFlag string
	// container picks the controller container by name substring ("" = the
	// first); only for reading its args.
	container string
	// refresh is how often the pod list is re-read.
	refresh time.Duration
	now     func() time.Time

	mu       sync.Mutex
	pods     []corev1.Pod
	listedAt time.Time
	forwards map[string]*forward // by namespace/name
}

// forward is one live port-forward to a pod.
type forward struct {
	uid       string
	localPort uint16
	cancel    context.CancelFunc
	done      chan struct{} // closed when ForwardPorts returns
	err       error         // why it ended, once done is closed
	errOut    *lockedWriter // the forwarder's complaints about connections
}

func (f *forward) alive() bool {
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}

func (s *podSource) where() string {
	if s.namespace == "" {
		return "any namespace"
	}
	return "namespace " + s.namespace
}

// flags names the flags that point the source at other pods.
func (s *podSource) flags() string {
	if s.whereFlag != "" {
		return "--" + s.whereFlag
	}
	return "--" + FlagControllerSelector + "/--" + FlagControllerNamespace
}

// list re-reads the pods when the last list is older than refresh.
func (s *podSource) list(ctx context.Context) ([]corev1.Pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods != nil && s.now().Sub(s.listedAt) < s.refresh {
		return s.pods, nil
	}
	pl, err := s.client.CoreV1().Pods(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: s.selector})
	if err != nil {
		return nil, fmt.Errorf("list pods (selector %q) in %s: %w (needs RBAC: list pods in %s; or set %s)",
			s.selector, s.where(), err, s.where(), s.flags())
	}
	var pods []corev1.Pod
	for _, p := range pl.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		if s.whereFlag != "" {
			return nil, fmt.Errorf("no running pods match selector %q in %s: set --%s", s.selector, s.where(), s.whereFlag)
		}
		return nil, fmt.Errorf("no running controller pods match selector %q in %s: set --%s (and --%s) to the ingress controller's pod labels",
			s.selector, s.where(), FlagControllerSelector, FlagControllerNamespace)
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	// Found in all namespaces but all in one: later re-lists ask only that
	// namespace, so a long run does not list a big cluster's pods (even
	// filtered by labels, a cluster-wide list costs the API server every
	// namespace) every refresh.
	if s.namespace == "" && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Namespace != pods[0].Namespace }) {
		s.namespace = pods[0].Namespace
	}
	s.pods, s.listedAt = pods, s.now()
	return pods, nil
}

func (s *podSource) endpoints(ctx context.Context) ([]endpoint, error) {
	pods, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forwards == nil {
		s.forwards = map[string]*forward{}
	}
	seen := map[string]bool{}
	eps := make([]endpoint, 0, len(pods))
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		seen[key] = true
		f := s.forwards[key]
		if f != nil && (!f.alive() || f.uid != string(p.UID)) {
			f.cancel()
			f = nil
		}
		if f == nil {
			f, err = s.open(ctx, p)
			if err != nil {
				// The list may be stale (pod replaced): re-list next poll.
				s.listedAt = time.Time{}
				eps = append(eps, endpoint{Replica: key, Err: err})
				continue
			}
			s.forwards[key] = f
		}
		hint := fmt.Sprintf("via port-forward to pod %s port %d; if the controller listens elsewhere set --%s", key, s.port, s.portFlag)
		if last := f.errOut.lastLine(); last != "" {
			hint += "; port-forward said: " + last
		}
		eps = append(eps, endpoint{Replica: key, BaseURL: fmt.Sprintf("http://127.0.0.1:%d", f.localPort), Hint: hint})
	}
	for key, f := range s.forwards {
		if !seen[key] {
			f.cancel()
			delete(s.forwards, key)
		}
	}
	return eps, nil
}

// open starts a port-forward to the pod's port on a free loopback port.
func (s *podSource) open(ctx context.Context, p corev1.Pod) (*forward, error) {
	fail := func(err error) error {
		return fmt.Errorf("port-forward to pod %s/%s port %d: %w (needs RBAC: create pods/portforward in namespace %s; if the controller listens elsewhere set --%s)",
			p.Namespace, p.Name, s.port, err, p.Namespace, s.portFlag)
	}
	if s.config == nil {
		return nil, fail(errors.New("no REST config to reach the API server"))
	}
	rt, upgrader, err := spdy.RoundTripperFor(s.config)
	if err != nil {
		return nil, fail(err)
	}
	// The URL is built from the config, not from the typed client's REST
	// client, so that any kubernetes.Interface (a fake one in tests) will do.
	host, _, err := rest.DefaultServerUrlFor(s.config)
	if err != nil {
		return nil, fail(err)
	}
	u := host.JoinPath("api", "v1", "namespaces", p.Namespace, "pods", p.Name, "portforward")
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	fctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	errOut := &lockedWriter{}
	pf, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(s.port)}, ready, io.Discard, errOut)
	if err != nil {
		cancel()
		return nil, fail(err)
	}
	f := &forward{uid: string(p.UID), cancel: cancel, done: make(chan struct{}), errOut: errOut}
	go func() {
		f.err = pf.ForwardPorts()
		close(f.done)
	}()
	select {
	case <-ready:
	case <-f.done:
		cancel()
		if f.err == nil {
			f.err = errors.New("port-forward ended before it was ready")
		}
		return nil, fail(f.err)
	case <-ctx.Done():
		cancel()
		return nil, fail(ctx.Err())
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		cancel()
		return nil, fail(fmt.Errorf("no local port: %v", err))
	}
	f.localPort = ports[0].Local
	return f, nil
}

func (s *podSource) containers(ctx context.Context) []corev1.Container {
	pods, err := s.list(ctx)
	if err != nil {
		return nil
	}
	var out []corev1.Container
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			if s.container == "" || strings.Contains(c.Name, s.container) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

func (s *podSource) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, f := range s.forwards {
		f.cancel()
		<-f.done
		delete(s.forwards, key)
	}
	return nil
}

// lockedWriter keeps the last line the port-forwarder's goroutines wrote.
type lockedWriter struct {
	mu   sync.Mutex
	last string
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := strings.TrimSpace(string(p)); s != "" {
		if i := strings.LastIndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		l.last = s
	}
	return len(p), nil
}

func (l *lockedWriter) lastLine() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}
