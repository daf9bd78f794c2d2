package traefik

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Every listener is on loopback, the three Kubernetes providers read the
// given API server, and nothing calls out to the internet.
func TestArgs(t *testing.T) {
	args := Args(Config{APIServerURL: "https://127.0.0.1:6443", CAFile: "/ca", TokenFile: "/tok", Throttle: 500 * time.Millisecond}, 4000, 4002, 4001)
	for _, want := range []string{
		"--entryPoints.web.address=127.0.0.1:4000",
		"--entryPoints.traefik.address=127.0.0.1:4001",
		"--entryPoints.websecure.address=127.0.0.1:4002",
		"--entryPoints.websecure.http.tls=true",
		"--providers.providersThrottleDuration=500ms",
		"--global.checkNewVersion=false",
		"--global.sendAnonymousUsage=false",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("args lack %s: %q", want, args)
		}
	}
	for _, p := range []string{ProviderIngress, ProviderGateway, ProviderIngressNGINX} {
		for _, want := range []string{"=true", ".endpoint=https://127.0.0.1:6443", ".token=/tok", ".certAuthFilePath=/ca"} {
			if !slices.Contains(args, "--providers."+p+want) {
				t.Errorf("provider %s lacks %s", p, want)
			}
		}
	}
	for _, a := range args {
		if strings.HasSuffix(a, ".address=:4000") || strings.Contains(a, "0.0.0.0") {
			t.Errorf("listener not on loopback: %s", a)
		}
	}
	if got := Args(Config{}, 1, 2, 3); !slices.Contains(got, "--providers.providersThrottleDuration=0s") {
		t.Errorf("a zero throttle is not passed through: %q", got)
	}
}
