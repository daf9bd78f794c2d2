package measure

import (
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
)

func TestValidateStreams(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      StreamOptions
		nofile uint64
		want   string // "" = valid
	}{
		{"off", StreamOptions{}, 1024, ""},
		{"websocket", StreamOptions{N: 200, Protocol: load.ProtocolWebSocket}, 1 << 20, ""},
		{"no protocol", StreamOptions{N: 200}, 1 << 20, "--streams 200 needs --stream-protocol"},
		{"no count", StreamOptions{Protocol: load.ProtocolGRPC}, 1 << 20, "--stream-protocol grpc needs --streams"},
		{"bad protocol", StreamOptions{N: 1, Protocol: "sse"}, 1 << 20, `--stream-protocol "sse"`},
		{"negative", StreamOptions{N: -1}, 1 << 20, "must not be negative"},
		// 10,000 streams + 64 load connections + 1024 headroom > 10,000.
		{"over the fd limit", StreamOptions{N: 10000, Protocol: load.ProtocolGRPC}, 10000, "RLIMIT_NOFILE"},
		{"at the fd limit", StreamOptions{N: 10000 - 64 - fdHeadroom, Protocol: load.ProtocolGRPC}, 10000, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateStreams(tc.o, 64, tc.nofile)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("validateStreams = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validateStreams = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestStreamDrainSpread(t *testing.T) {
	jittered := probe.StreamDrain{Mode: probe.DrainCloseJittered, Spread: 5 * time.Second}
	for _, tc := range []struct {
		o    StreamOptions
		want time.Duration
	}{
		{StreamOptions{}, 0},
		{StreamOptions{N: 10, Drain: probe.StreamDrain{Mode: probe.DrainClose}}, 0},
		{StreamOptions{N: 0, Drain: jittered}, 0},
		{StreamOptions{N: 10, Drain: jittered}, 5500 * time.Millisecond},
	} {
		if got := streamDrainSpread(tc.o); got != tc.want {
			t.Errorf("streamDrainSpread(%+v) = %s, want %s", tc.o, got, tc.want)
		}
	}
}
