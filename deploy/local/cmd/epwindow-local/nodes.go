package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/deploy/local/controlplane"
	"github.com/epwindow/epwindow/deploy/local/kubeproxy"
	"github.com/epwindow/epwindow/deploy/local/nodeagent"
)

// nodeAgent is the running node agent.
type nodeAgent struct {
	cfg    nodeagent.Config
	cancel context.CancelFunc
	done   chan struct{}
	err    chan error
	log    *slog.Logger
	logf   *os.File
}

// Err delivers the node agent's failure.
func (n *nodeAgent) Err() <-chan error { return n.err }

// dispatchShim runs the node agent's container shim when this process was
// started as one (nodeagent.ShimArg); it never returns then.
func dispatchShim() bool {
	if len(os.Args) > 1 && os.Args[1] == nodeagent.ShimArg {
		nodeagent.ShimMain(os.Args[2:])
		return true
	}
	return false
}

// cleanupStale removes what a crashed run left behind: its node agent's
// processes in their network namespaces, those namespaces, links and route
// (found by the agent's name prefix), and its kube-proxy's rules (found by
// kube-proxy's marker), whatever this run's --proxy-mode.
func cleanupStale(ctx context.Context) error {
	if err := nodeagent.CleanupStale(nodeagent.DefaultPrefix); err != nil {
		return fmt.Errorf("remove a crashed run's network state: %w", err)
	}
	if err := kubeproxy.CleanupStale(ctx); err != nil {
		return fmt.Errorf("remove a crashed run's kube-proxy rules: %w", err)
	}
	return nil
}

func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	return names
}

// startNodes sets up the pod network, runs the node agent for cfg.Nodes
// nodes and waits until every Node is Ready.
func startNodes(ctx context.Context, cfg upConfig, cp *controlplane.ControlPlane, log *slog.Logger) (*nodeAgent, error) {
	n := &nodeAgent{done: make(chan struct{}), err: make(chan error, 1), log: log}
	if cfg.Nodes == 0 {
		close(n.done)
		return n, nil
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, "nodeagent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	n.logf = logf
	n.cfg = nodeagent.Config{
		Client:    cp.Client,
		Nodes:     nodeNames(cfg.Nodes),
		BinDir:    cfg.BinDir,
		CNIBinDir: cfg.CNIBinDir,
		StateDir:  filepath.Join(cfg.Dir, "nodes"),
		// ClusterIPs are routed when a kube-proxy will rewrite them.
		ServiceCIDR: serviceCIDR(cfg),
		ClusterDNS:  clusterDNS(cfg),
		Log:         slog.New(slog.NewTextHandler(logf, nil)),
	}
	if err := nodeagent.SetupNetwork(n.cfg); err != nil {
		n.Stop()
		return nil, fmt.Errorf("pod network: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	go func() {
		defer close(n.done)
		if err := nodeagent.Run(runCtx, n.cfg); err != nil && runCtx.Err() == nil {
			n.err <- err
		}
	}()
	if err := waitNodesReady(ctx, cp, n, n.cfg.Nodes, 30*time.Second); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

func waitNodesReady(ctx context.Context, cp *controlplane.ControlPlane, n *nodeAgent, names []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ready := 0
		for _, name := range names {
			node, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				break
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == len(names) {
			return nil
		}
		select {
		case err := <-n.err:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes Ready after %s (see nodeagent.log)", ready, len(names), timeout)
		}
	}
}

// Stop stops the node agent, then removes the pod network (which also
// kills any container process still in a pod's namespace).
func (n *nodeAgent) Stop() {
	if n.cancel != nil {
		n.cancel()
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			n.log.Error("node agent did not stop within 30s")
		}
	}
	if len(n.cfg.Nodes) > 0 {
		if err := nodeagent.TeardownNetwork(n.cfg); err != nil {
			n.log.Error("tear down the pod network", "error", err)
		}
	}
	if n.logf != nil {
		n.logf.Close()
	}
}

func serviceCIDR(cfg upConfig) string {
	if cfg.ProxyMode == kubeproxy.ModeNone {
		return ""
	}
	return controlplane.ServiceClusterIPRange
}
