package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// hostIP is every node's address: the kubelet API listens on loopback.
const hostIP = "127.0.0.1"

// agent is one running node agent.
type agent struct {
	cfg      Config
	client   kubernetes.Interface
	log      *slog.Logger
	clock    clock.Clock
	net      *podNetwork
	hostIP   string
	podCIDR  netip.Prefix
	port     int
	shimPath string
	nodes    map[string]bool

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	// finished holds pods whose worker is done, so that late events
	// (the agent's own status patch, the deletion) start no new worker.
	finished map[types.UID]bool
	wg       sync.WaitGroup
}

// Run registers the nodes, keeps them Ready and runs the pods bound to
// them until ctx ends; then it kills every container at once (no grace:
// the cluster is going away), runs CNI DEL and removes the pods' network
// namespaces, and returns. SetupNetwork must have run first. It returns
// early with an error if the nodes cannot be registered or the kubelet
// API cannot listen.
func Run(ctx context.Context, cfg Config) error {
	return run(ctx, cfg, func() {})
}

// run is Run, calling registered once every node is registered.
func run(ctx context.Context, cfg Config, registered func()) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	a := &agent{
		cfg:      cfg,
		client:   cfg.Client,
		log:      cfg.Log,
		clock:    clock.RealClock{},
		net:      newPodNetwork(cfg),
		hostIP:   hostIP,
		workers:  map[types.UID]*podWorker{},
		finished: map[types.UID]bool{},
		nodes:    map[string]bool{},
	}
	for _, n := range cfg.Nodes {
		a.nodes[n] = true
	}
	a.shimPath = cfg.ShimPath
	if a.shimPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable for the container shim: %w", err)
		}
		a.shimPath = exe
	}
	if _, err := os.Stat(confListPath(cfg, cfg.Nodes[0])); err != nil {
		return fmt.Errorf("CNI config missing: call SetupNetwork before Run: %w", err)
	}
	ln, err := listenKubelet(cfg.KubeletPort)
	if err != nil {
		return err
	}
	a.port = ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srvErr := make(chan error, 1)
	go func() { srvErr <- a.serveKubelet(ctx, ln) }()

	for i, n := range cfg.Nodes {
		sub, err := nodeSubnet(cfg.PodCIDR, i)
		if err != nil {
			return err
		}
		if err := a.registerNode(ctx, n, sub.String()); err != nil {
			return err
		}
	}
	var hb sync.WaitGroup
	for _, n := range cfg.Nodes {
		hb.Add(1)
		go func() { defer hb.Done(); a.heartbeat(ctx, n) }()
	}
	a.log.Info("nodes registered", "nodes", cfg.Nodes, "kubelet_port", a.port)
	registered()

	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.onPod(ctx, obj) },
		UpdateFunc: func(_, obj any) { a.onPod(ctx, obj) },
		DeleteFunc: func(obj any) { a.onPodDeleted(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-srvErr:
		runErr = fmt.Errorf("kubelet API server: %w", err)
		cancel()
	}
	factory.Shutdown()
	a.wg.Wait()
	hb.Wait()
	return runErr
}

// onPod hands a pod bound to one of the agent's nodes to its worker,
// starting the worker on first sight.
func (a *agent) onPod(ctx context.Context, obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok || !a.nodes[pod.Spec.NodeName] {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ctx.Err() != nil || a.finished[pod.UID] {
		return
	}
	if w, ok := a.workers[pod.UID]; ok {
		w.update(pod)
		return
	}
	w := newPodWorker(a, pod)
	a.workers[pod.UID] = w
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		w.run(ctx)
		a.mu.Lock()
		delete(a.workers, pod.UID)
		a.finished[pod.UID] = true
		a.mu.Unlock()
	}()
}

// onPodDeleted tells the worker its pod object is gone.
func (a *agent) onPodDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	w := a.workers[pod.UID]
	delete(a.finished, pod.UID)
	a.mu.Unlock()
	if w != nil {
		w.update(nil)
	}
}

// listenKubelet opens the kubelet API's port on loopback.
func listenKubelet(port int) (net.Listener, error) {
	var err error
	for i := 0; i < 10; i++ {
		var ln net.Listener
		ln, err = net.Listen("tcp", net.JoinHostPort(hostIP, fmt.Sprint(port)))
		if err == nil {
			return ln, nil
		}
		if port == 0 || !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("kubelet API on %s:%d (set a free kubelet port): %w", hostIP, port, err)
}
