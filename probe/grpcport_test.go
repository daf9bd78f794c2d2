package probe

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// serveGRPCPort runs a probe on loopback whose gRPC port (--grpc-listen) is
// a second loopback listener; it returns the probe and that port's address.
func serveGRPCPort(t *testing.T, cfg Config) (*inProcess, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.GRPCListener = gln
	p := newInProcess(t, ln.Addr().String(), &cfg)
	cfg.MaxPeers = DefaultMaxPeers
	cfg.MaxStreamRecords = DefaultMaxStreamRecords
	cfg.Listen = "unused"
	p.start(t, func(ctx context.Context, log *slog.Logger) error { return Serve(ctx, ln, cfg, p.sigterm, log) })
	return p, gln.Addr().String()
}

// countingClient is a gRPC client to addr whose dialer counts the TCP
// connections it opens.
func countingClient(t *testing.T, addr string) (*grpc.ClientConn, *atomic.Int64) {
	t.Helper()
	var dials atomic.Int64
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, &dials
}

func hello(t *testing.T, cc *grpc.ClientConn) (pod string, ns int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, GRPCHello, new(emptypb.Empty), out); err != nil {
		t.Fatalf("Hello: %v", err)
	}
	p, ns, ok := ParseTrafficBody([]byte(out.GetValue()))
	if !ok {
		t.Fatalf("Hello answered %q, not a traffic body", out.GetValue())
	}
	return string(p), ns
}

// Hello answers the traffic body on both ports, and each call is a traffic
// request on its connection in the probe's record, as an HTTP GET is.
func TestGRPCPortHello(t *testing.T) {
	const off = 7 * time.Second
	p, gaddr := serveGRPCPort(t, Config{Hold: time.Minute, ClockOffset: off, PodName: "pod-g"})
	wantNS := t0.Add(off).UnixNano()

	grpcPort, dials := countingClient(t, gaddr)
	mainPort, _ := countingClient(t, p.addr)
	const calls = 5
	for range calls {
		for name, cc := range map[string]*grpc.ClientConn{"--grpc-listen": grpcPort, "--listen (h2c)": mainPort} {
			pod, ns := hello(t, cc)
			if pod != "pod-g" || ns != wantNS {
				t.Fatalf("Hello on %s = pod %q time %d, want pod-g %d (the fake clock plus the offset)", name, pod, ns, wantNS)
			}
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the client opened %d connections to the gRPC port, want 1 (no connection age set)", n)
	}
	tl, err := ParseTimeline([]byte(p.expect(t, "GET", "/timeline", 200)))
	if err != nil {
		t.Fatal(err)
	}
	// The main port's calls are traffic, as any request there; the gRPC
	// port's are requests but not traffic (grpcStats). /timeline itself is
	// a control request on a third connection.
	if tl.TrafficRequests != calls || tl.TrafficAccepts != 1 || tl.Requests < 2*calls || tl.Accepts < 2 {
		t.Errorf("timeline: %d traffic requests on %d connections, %d requests on %d; want %d traffic on 1, at least %d on 2",
			tl.TrafficRequests, tl.TrafficAccepts, tl.Requests, tl.Accepts, calls, 2*calls)
	}
}

// --grpc-max-connection-age makes grpc-go end each connection at that age
// (GOAWAY, then a close after the grace), so a client that keeps calling
// dials again; without it the one connection lasts.
func TestGRPCPortMaxConnectionAge(t *testing.T) {
	// 300 ms ±10% (grpc-go's jitter, internal/transport/http2_server.go
	// keepalive) over 1.5 s of calls is at least four ages; the test asks for
	// three reconnects so that a slow runner's late GOAWAY cannot fail it.
	const age, run = 300 * time.Millisecond, 1500 * time.Millisecond
	p, gaddr := serveGRPCPort(t, Config{Hold: time.Minute, GRPCMaxConnectionAge: age,
		GRPCMaxConnectionAgeGrace: 200 * time.Millisecond})
	cc, dials := countingClient(t, gaddr)
	for end := time.Now().Add(run); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if pod, _ := hello(t, cc); pod != "pod-a" {
			t.Fatalf("Hello = pod %q, want pod-a", pod)
		}
	}
	if n := dials.Load(); n < 4 {
		t.Errorf("the client opened %d connections in %s with a %s connection age, want at least 4", n, run, age)
	}
	tl, err := ParseTimeline([]byte(p.expect(t, "GET", "/timeline", 200)))
	if err != nil {
		t.Fatal(err)
	}
	// The /timeline request's connection is the one more.
	if tl.Accepts != dials.Load()+1 {
		t.Errorf("timeline: %d connections, the client dialled %d", tl.Accepts, dials.Load())
	}
}

// At SIGTERM with --refuse-on-sigterm, the gRPC port stops accepting and
// sends GOAWAY like the main port: a new call fails fast instead of
// landing on a pod that is going.
func TestGRPCPortGoawayAtSigterm(t *testing.T) {
	p, gaddr := serveGRPCPort(t, Config{Hold: time.Minute, RefuseOnSigterm: true})
	cc, _ := countingClient(t, gaddr)
	hello(t, cc)
	close(p.sigterm)
	waitFor(t, "the gRPC port to refuse connections", func() bool {
		c, err := net.DialTimeout("tcp", gaddr, time.Second)
		if err == nil {
			c.Close()
			return false
		}
		return true
	})
	// The listener closes before the open connection gets its GOAWAY
	// (grpc-go's GracefulStop closes listeners, then drains transports).
	waitFor(t, "calls to fail after SIGTERM", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return cc.Invoke(ctx, GRPCHello, new(emptypb.Empty), new(wrapperspb.StringValue)) != nil
	})
}

func TestGRPCPortConfigErrors(t *testing.T) {
	base := Config{Listen: ":8080", Hold: time.Second, ShutdownTimeout: time.Second, MaxPeers: 1, PodName: "p",
		StreamInterval: time.Second, MaxStreamRecords: 1}
	if err := base.Validate(); err != nil {
		t.Fatalf("base config: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"age without port", func(c *Config) { c.GRPCMaxConnectionAge = time.Second }, "--grpc-listen"},
		{"negative age", func(c *Config) { c.GRPCListen = ":9090"; c.GRPCMaxConnectionAge = -time.Second }, "--grpc-max-connection-age"},
	} {
		c := base
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
