package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Agent is a node agent running in the background (see Start).
type Agent struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan struct{}
	err    chan error
	runErr error
	once   sync.Once
	stop   error
}

// Start does what the local cluster needs in one call: it removes what a
// crashed agent with cfg.Prefix left behind (CleanupStale), sets up the
// network (SetupNetwork), starts Run in the background and returns once
// every node is registered. Stop undoes all of it.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := CleanupStale(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("remove stale node agent state: %w", err)
	}
	if err := SetupNetwork(cfg); err != nil {
		return nil, errors.Join(err, TeardownNetwork(cfg))
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &Agent{cfg: cfg, cancel: cancel, done: make(chan struct{}), err: make(chan error, 1)}
	registered := make(chan struct{})
	go func() {
		defer close(a.done)
		a.runErr = run(ctx, cfg, func() { close(registered) })
		if a.runErr == nil && ctx.Err() == nil {
			a.runErr = errors.New("node agent stopped")
		}
		if ctx.Err() == nil {
			a.err <- a.runErr
		}
	}()
	select {
	case <-registered:
		return a, nil
	case <-a.done:
		cancel()
		return nil, errors.Join(a.runErr, TeardownNetwork(cfg))
	}
}

// Err delivers the agent's error if it stops before Stop is called.
func (a *Agent) Err() <-chan error { return a.err }

// Stop kills every container, removes the pods' networks, the bridge, the
// unreachable route and the CNI state, and waits for all of it. The pod and
// Node objects are left alone (the API server is going away too).
func (a *Agent) Stop() error {
	a.once.Do(func() {
		a.cancel()
		<-a.done
		a.stop = TeardownNetwork(a.cfg)
	})
	return a.stop
}
