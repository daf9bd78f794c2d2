package probe

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestParseStreamDrain(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want StreamDrain
		err  string
	}{
		{in: "none", want: StreamDrain{Mode: DrainNone}},
		{in: "close", want: StreamDrain{Mode: DrainClose}},
		{in: "goaway", want: StreamDrain{Mode: DrainGoaway}},
		{in: "close-jittered=5s", want: StreamDrain{Mode: DrainCloseJittered, Spread: 5 * time.Second}},
		{in: "close-jittered", err: "positive DUR"},
		{in: "close-jittered=0s", err: "positive DUR"},
		{in: "close-jittered=-1s", err: "positive DUR"},
		{in: "close=1s", err: "takes no =DUR"},
		{in: "drain", err: "want none, close"},
		{in: "", err: "want none, close"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseStreamDrain(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--stream-drain") {
					t.Fatalf("ParseStreamDrain(%q) = %v, %v; want an error naming --stream-drain with %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseStreamDrain(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			if back, err := ParseStreamDrain(got.String()); err != nil || back != got {
				t.Fatalf("round trip %q -> %q -> %v, %v", tc.in, got.String(), back, err)
			}
		})
	}
}

// streamInterval is short so that a test sees several messages in
// milliseconds.
const streamInterval = 20 * time.Millisecond

// serveStreamsProbe runs a probe on loopback on the real clock (stream
// timers must fire by themselves) with hold.
func serveStreamsProbe(t *testing.T, drain StreamDrain, hold time.Duration) *inProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Hold: hold, StreamDrain: drain, StreamInterval: streamInterval,
		MaxStreamRecords: DefaultMaxStreamRecords}
	p := newInProcess(t, ln.Addr().String(), &cfg)
	cfg.Clock = nil
	cfg.MaxPeers = DefaultMaxPeers
	cfg.Listen = "unused"
	p.start(t, func(ctx context.Context, log *slog.Logger) error { return Serve(ctx, ln, cfg, p.sigterm, log) })
	return p
}

// wsStream is a WebSocket client stream whose reader reports its end.
type wsStream struct {
	id   string
	c    *websocket.Conn
	msgs chan string
	end  chan error
}

// streamIDs numbers the test clients' streams (HeaderStream).
var streamIDs atomic.Int64

func nextStreamID() string { return "t-" + strconv.FormatInt(streamIDs.Add(1), 10) }

func dialWS(t *testing.T, p *inProcess) *wsStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	id := nextStreamID()
	c, _, err := websocket.Dial(ctx, "ws://"+p.addr+PathStream, &websocket.DialOptions{HTTPHeader: http.Header{HeaderStream: {id}}})
	if err != nil {
		t.Fatalf("dial websocket: %v", err)
	}
	s := &wsStream{id: id, c: c, msgs: make(chan string, 1024), end: make(chan error, 1)}
	go pump(s.msgs, s.end, func() (string, error) {
		_, b, err := c.Read(context.Background())
		return string(b), err
	})
	t.Cleanup(func() { c.CloseNow() })
	return s
}

// grpcStream is a gRPC client stream of GRPCMethod.
type grpcStream struct {
	id   string
	cc   *grpc.ClientConn
	msgs chan string
	end  chan error
}

func dialGRPC(t *testing.T, p *inProcess) *grpcStream {
	t.Helper()
	cc, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s := &grpcStream{id: nextStreamID(), cc: cc, msgs: make(chan string, 1024), end: make(chan error, 1)}
	st, err := openGRPC(metadata.AppendToOutgoingContext(context.Background(), GRPCHeaderStream, s.id), cc)
	if err != nil {
		t.Fatalf("open grpc stream: %v", err)
	}
	go pump(s.msgs, s.end, func() (string, error) {
		m := new(wrapperspb.StringValue)
		err := st.RecvMsg(m)
		return m.GetValue(), err
	})
	return s
}

// pump reads messages into msgs (dropping them when it is full) until read
// fails, and sends that error to end.
func pump(msgs chan<- string, end chan<- error, read func() (string, error)) {
	for {
		m, err := read()
		if err != nil {
			end <- err
			return
		}
		select {
		case msgs <- m:
		default:
		}
	}
}

func openGRPC(ctx context.Context, cc *grpc.ClientConn) (grpc.ClientStream, error) {
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, GRPCMethod)
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(&emptypb.Empty{}); err != nil {
		return nil, err
	}
	return st, st.CloseSend()
}

// recv waits for a message from msgs and checks it names the pod.
func recv(t *testing.T, what string, msgs <-chan string) {
	t.Helper()
	select {
	case m := <-msgs:
		if !strings.HasPrefix(m, "pod-a ") || len(strings.Fields(m)) != 3 {
			t.Fatalf("%s message %q, want \"pod-a SEQ UNIXNS\"", what, m)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("%s: no message", what)
	}
}

func waitEnd(t *testing.T, what string, end <-chan error) (error, time.Time) {
	t.Helper()
	select {
	case err := <-end:
		return err, time.Now()
	case <-time.After(waitTimeout):
		t.Fatalf("%s did not end", what)
	}
	return nil, time.Time{}
}

func (p *inProcess) streamLog(t *testing.T) *StreamLog {
	t.Helper()
	var tl Timeline
	if err := json.Unmarshal([]byte(p.expect(t, "GET", PathTimeline, 200)), &tl); err != nil {
		t.Fatal(err)
	}
	if tl.Streams == nil {
		t.Fatal("timeline has no streams")
	}
	return tl.Streams
}

// openBoth opens n WebSocket and n gRPC streams and waits until the probe
// has them all and each has had a message.
func openBoth(t *testing.T, p *inProcess, n int) ([]*wsStream, []*grpcStream) {
	t.Helper()
	var ws []*wsStream
	var gs []*grpcStream
	for range n {
		ws = append(ws, dialWS(t, p))
		gs = append(gs, dialGRPC(t, p))
	}
	for i := range n {
		recv(t, "websocket", ws[i].msgs)
		recv(t, "grpc", gs[i].msgs)
	}
	if l := p.streamLog(t); l.Open != int64(2*n) {
		t.Fatalf("probe has %d streams open, want %d", l.Open, 2*n)
	}
	return ws, gs
}

func TestStreamsNoneOutliveSigtermAndResetAtExit(t *testing.T) {
	p := serveStreamsProbe(t, StreamDrain{Mode: DrainNone}, time.Minute)
	ws, gs := openBoth(t, p, 3)
	close(p.sigterm)
	waitFor(t, "sigterm stamped", func() bool { return p.streamLog(t).OpenAtSigterm == 6 })
	// Nothing ends at SIGTERM: messages keep coming.
	for i := range ws {
		recv(t, "websocket after sigterm", ws[i].msgs)
		recv(t, "grpc after sigterm", gs[i].msgs)
	}
	p.expect(t, "POST", PathRelease, 200)
	p.waitDone(t)
	seen := map[string]time.Time{}
	for i := range ws {
		err, at := waitEnd(t, "websocket", ws[i].end)
		if code := websocket.CloseStatus(err); code != -1 {
			t.Errorf("websocket ended with close code %d, want no close frame (abrupt): %v", code, err)
		}
		seen[ws[i].id] = at
		err, at = waitEnd(t, "grpc", gs[i].end)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("grpc stream ended with %v, want UNAVAILABLE", err)
		}
		seen[gs[i].id] = at
	}
	tl := p.termination(t)
	if tl.Streams == nil || tl.Streams.Ended[EndProcessExit] != 6 || tl.Streams.Records != nil {
		t.Fatalf("termination message streams = %+v, want 6 process_exit and no records", tl.Streams)
	}
	// The termination message names each stream by the client's id, with
	// the probe's end: after its own SIGTERM, and before the client saw the
	// reset (one clock here; waitEnd stamps after a channel receive).
	if len(tl.Streams.Ends) != 6 || tl.Streams.EndsDropped != 0 {
		t.Fatalf("termination message ends = %+v (dropped %d), want the 6 streams", tl.Streams.Ends, tl.Streams.EndsDropped)
	}
	for _, e := range tl.Streams.Ends {
		client, ok := seen[e.Client]
		end := time.Unix(0, e.EndNS)
		if !ok || e.How != EndProcessExit || end.Before(*tl.Sigterm) || end.After(client) {
			t.Errorf("probe end %+v (client saw its end at %s, sigterm %s): want a client's stream, process_exit, between", e, client, tl.Sigterm)
		}
	}
}

func TestStreamsCloseAtSigterm(t *testing.T) {
	p := serveStreamsProbe(t, StreamDrain{Mode: DrainClose}, time.Minute)
	ws, gs := openBoth(t, p, 3)
	sent := time.Now()
	close(p.sigterm)
	for i := range ws {
		err, at := waitEnd(t, "websocket", ws[i].end)
		if code := websocket.CloseStatus(err); code != websocket.StatusServiceRestart {
			t.Errorf("websocket ended with %v, want close code 1012", err)
		}
		// The close is one channel send and one frame on loopback after
		// the probe's serve loop sees SIGTERM: 100 ms is the bound
		// and leaves room for a busy 2-core machine under -race.
		if d := at.Sub(sent); d > 100*time.Millisecond {
			t.Errorf("websocket closed %s after SIGTERM, want ≤ 100ms", d)
		}
		err, at = waitEnd(t, "grpc", gs[i].end)
		if !errors.Is(err, io.EOF) {
			t.Errorf("grpc stream ended with %v, want io.EOF (status OK)", err)
		}
		if d := at.Sub(sent); d > 100*time.Millisecond {
			t.Errorf("grpc stream ended %s after SIGTERM, want ≤ 100ms", d)
		}
	}
	l := p.streamLog(t)
	if l.Ended[EndAppClose] != 6 || l.Open != 0 {
		t.Fatalf("stream log %+v, want 6 app_close and none open", l)
	}
	for _, r := range l.Records {
		if r.Code == nil || r.Ended == nil || r.Messages < 1 {
			t.Errorf("record %+v: want a code, an end and messages", r)
		}
	}
	p.expect(t, "POST", PathRelease, 200)
	p.waitDone(t)
}

func TestStreamsCloseJitteredSpread(t *testing.T) {
	const spread = 400 * time.Millisecond
	p := serveStreamsProbe(t, StreamDrain{Mode: DrainCloseJittered, Spread: spread}, time.Minute)
	// 8 streams: with uniform draws over 400 ms, all of them landing in
	// one 50 ms slot has probability 8 × (1/8)^7 ≈ 4e-6.
	ws, gs := openBoth(t, p, 4)
	close(p.sigterm)
	for i := range ws {
		err, _ := waitEnd(t, "websocket", ws[i].end)
		if code := websocket.CloseStatus(err); code != websocket.StatusServiceRestart {
			t.Errorf("websocket ended with %v, want close code 1012", err)
		}
		if err, _ := waitEnd(t, "grpc", gs[i].end); !errors.Is(err, io.EOF) {
			t.Errorf("grpc stream ended with %v, want io.EOF", err)
		}
	}
	var tl Timeline
	if err := json.Unmarshal([]byte(p.expect(t, "GET", PathTimeline, 200)), &tl); err != nil {
		t.Fatal(err)
	}
	var first, last time.Duration = spread * 10, -1
	for _, r := range tl.Streams.Records {
		d := r.Ended.Sub(*tl.Sigterm)
		first, last = min(first, d), max(last, d)
	}
	// Ends are drawn in [0, spread) after the SIGTERM stamp; 100 ms covers
	// the timers' scheduling on a busy machine.
	if first < 0 || last > spread+100*time.Millisecond || last-first < 50*time.Millisecond {
		t.Fatalf("closes from %s to %s after SIGTERM, want spread within [0, %s]", first, last, spread)
	}
	p.expect(t, "POST", PathRelease, 200)
	p.waitDone(t)
}

func TestStreamsGoawayLetsGRPCStreamsFinish(t *testing.T) {
	p := serveStreamsProbe(t, StreamDrain{Mode: DrainGoaway}, 2*time.Second)
	ws, gs := openBoth(t, p, 2)
	close(p.sigterm)
	for i := range ws {
		err, _ := waitEnd(t, "websocket", ws[i].end)
		if code := websocket.CloseStatus(err); code != websocket.StatusGoingAway {
			t.Errorf("websocket ended with %v, want close code 1001", err)
		}
	}
	// The gRPC streams go on after GOAWAY...
	for i := range gs {
		for range 3 {
			recv(t, "grpc after goaway", gs[i].msgs)
		}
	}
	// ...but the connection took no new stream: a new RPC needs a new
	// connection, and the listener is closed.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := gs[0].cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, GRPCMethod)
	if err == nil {
		_ = st.SendMsg(&emptypb.Empty{})
		err = st.RecvMsg(new(wrapperspb.StringValue))
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("new stream after GOAWAY = %v, want UNAVAILABLE (connection refused)", err)
	}
	// The listener is closed, so no POST /release: the 2 s hold ends it,
	// and the streams still open end with status OK at exit.
	for i := range gs {
		if err, _ := waitEnd(t, "grpc", gs[i].end); !errors.Is(err, io.EOF) {
			t.Errorf("grpc stream ended with %v, want io.EOF (status OK)", err)
		}
	}
	p.waitDone(t)
	if got := p.termination(t).Streams.Ended[EndAppClose]; got != 4 {
		t.Fatalf("app_close = %d, want 4", got)
	}
}
