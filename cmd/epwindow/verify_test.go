package main

import "testing"

// --sidecar reaches verify.Config, and only when given.
func TestVerifySidecarFlag(t *testing.T) {
	writeKubeconfig(t)
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--url", "http://127.0.0.1:9090", "web"}, false},
		{[]string{"--url", "http://127.0.0.1:9090", "--sidecar", "web"}, true},
	} {
		cfg, err := parseVerify(t, tc.args...)
		if err != nil {
			t.Fatalf("verify %v: %v", tc.args, err)
		}
		if cfg.Sidecar != tc.want {
			t.Errorf("verify %v: Sidecar %v, want %v", tc.args, cfg.Sidecar, tc.want)
		}
	}
}
