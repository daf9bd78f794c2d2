package probe

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GRPCHello is the probe's unary method: it takes google.protobuf.Empty and
// answers a google.protobuf.StringValue holding the traffic body (pod name
// and clock, see AppendTrafficBody). A gRPC load generator calls it as an
// HTTP one GETs any path: one call, one routed request.
const GRPCHello = "/" + GRPCService + "/Hello"

// grpcPort is the probe's own gRPC port (--grpc-listen): a grpc.Server
// serving its listener itself rather than behind net/http, because only
// then does grpc-go apply its keepalive enforcement, MaxConnectionAge
// included (internal/transport/http2_server.go keepalive: GOAWAY when a
// connection reaches its age, then a close after MaxConnectionAgeGrace).
// That is how a gRPC service bounds its connections so that clients
// resolving it by DNS re-resolve (grpc-go's dns resolver re-resolves only
// when a connection is lost).
type grpcPort struct {
	srv *grpc.Server
}

// grpcStats records the port's connections and calls in the probe's
// recorder: a connection is an accept, every call a request on it, but not
// a traffic request. The port's clients resolve the headless Service and
// call the pod directly; the tool times that path from its client
// (grpc_last_routed), and the probe's traffic stages — the window — stay
// the proxies' paths', which a preStop sleep can bound: a DNS gRPC client
// leaves a pod only when its connection ends.
type grpcStats struct{ rec *Recorder }

type grpcConnKey struct{}

func (g grpcStats) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	c := g.rec.Accept(addrOf(info.RemoteAddr))
	return context.WithValue(ctx, grpcConnKey{}, c)
}

func (grpcStats) HandleConn(context.Context, stats.ConnStats) {}

func (grpcStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (g grpcStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.Begin); !ok {
		return
	}
	if c, ok := ctx.Value(grpcConnKey{}).(*Conn); ok {
		g.rec.Request(c, false)
	}
}

// startGRPCPort serves the stream service and Hello on ln with the
// connection age of cfg.
func startGRPCPort(ln net.Listener, cfg Config, hub *streamHub) *grpcPort {
	opts := []grpc.ServerOption{grpc.StatsHandler(grpcStats{rec: hub.rec})}
	if cfg.GRPCMaxConnectionAge > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      cfg.GRPCMaxConnectionAge,
			MaxConnectionAgeGrace: cfg.GRPCMaxConnectionAgeGrace,
		}))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&streamsDesc, hub)
	// Serve returns when the port is stopped; the main port's loop is the
	// one whose failure ends the probe.
	go func() { _ = srv.Serve(ln) }()
	return &grpcPort{srv: srv}
}

// goaway stops accepting and sends GOAWAY on every connection; calls in
// progress (streams included) go on until they end (grpc-go GracefulStop).
// It returns at once.
func (g *grpcPort) goaway() {
	if g != nil {
		go g.srv.GracefulStop()
	}
}

// drain is the end after the hold: GOAWAY, then whatever is still open
// after timeout is closed.
func (g *grpcPort) drain(ctx context.Context, timeout time.Duration) {
	if g == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		g.srv.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.srv.Stop()
	case <-ctx.Done():
		g.srv.Stop()
	}
}

// stop closes the listener and every connection at once.
func (g *grpcPort) stop() {
	if g != nil {
		g.srv.Stop()
	}
}

// hello answers Hello with the traffic body.
func (h *streamHub) hello(context.Context, *emptypb.Empty) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(string(AppendTrafficBody(nil, h.pod, h.rec.Now()))), nil
}

func listenGRPC(ctx context.Context, cfg Config) (net.Listener, error) {
	if cfg.GRPCListener != nil {
		return cfg.GRPCListener, nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.GRPCListen)
	if err != nil {
		return nil, fmt.Errorf("listen on %q (--grpc-listen): %w", cfg.GRPCListen, err)
	}
	return ln, nil
}
