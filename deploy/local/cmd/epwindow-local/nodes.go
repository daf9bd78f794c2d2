package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/epwindow/epwindow/deploy/local/controlplane"
)

// nodeAgent is the running node agent.
type nodeAgent struct {
	err chan error
}

// Err delivers the node agent's failure.
func (n *nodeAgent) Err() <-chan error { return n.err }

// Stop stops the node agent and removes its network state.
func (n *nodeAgent) Stop() {}

// dispatchShim runs the node agent's container shim when this process was
// started as one; it reports whether it did.
func dispatchShim() bool { return false }

// cleanupStaleNodes removes what a crashed run's node agent left behind.
func cleanupStaleNodes(cfg upConfig, log *slog.Logger) error { return nil }

// startNodes starts the node agent for cfg.Nodes nodes.
func startNodes(ctx context.Context, cfg upConfig, cp *controlplane.ControlPlane, log *slog.Logger) (*nodeAgent, error) {
	if cfg.Nodes > 0 {
		return nil, fmt.Errorf("this build has no node agent yet: use --%s 0", flagNodes)
	}
	return &nodeAgent{err: make(chan error)}, errors.Join()
}
