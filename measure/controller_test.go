package measure

import (
	"testing"

	"github.com/epwindow/epwindow/measure/upstream"
)

// The header names the controller from the IngressClass when one was read,
// else from the observer that was used (make demo's --observer skipper
// --observer-url: the header said only "class skipper"), with its version
// or why there is none.
func TestControllerOf(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		choice                upstream.Choice
		version               string
		controller, ver, note string
	}{
		{"explicit skipper by URL", upstream.Choice{Kind: upstream.KindSkipper}, "", "skipper", "", "not exposed"},
		{"explicit skipper, image tag", upstream.Choice{Kind: upstream.KindSkipper}, "v0.27.57", "skipper", "v0.27.57", ""},
		{"auto from the IngressClass", upstream.Choice{Kind: upstream.KindSkipper, Controller: upstream.ControllerSkipper}, "v0.27.57",
			upstream.ControllerSkipper, "v0.27.57", ""},
		{"explicit traefik, /api/version", upstream.Choice{Kind: upstream.KindTraefik}, "3.6.12", "traefik", "3.6.12", ""},
		{"explicit nginx, no tag", upstream.Choice{Kind: upstream.KindNginx}, "", "ingress-nginx", "", "not read"},
		{"Gateway controller", upstream.Choice{Kind: upstream.KindTraefik, Controller: upstream.ControllerTraefikGateway}, "3.6.12",
			upstream.ControllerTraefikGateway, "3.6.12", ""},
		{"none", upstream.Choice{Kind: upstream.KindNone}, "", "", "", ""},
		{"cmd", upstream.Choice{Kind: upstream.KindCmd}, "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, v, n := controllerOf(tc.choice, tc.version)
			if c != tc.controller || v != tc.ver || n != tc.note {
				t.Errorf("controllerOf = %q, %q, %q; want %q, %q, %q", c, v, n, tc.controller, tc.ver, tc.note)
			}
		})
	}
}
