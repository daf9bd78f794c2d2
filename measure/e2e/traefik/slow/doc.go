// Package slow runs the Traefik ground truth of package traefik on a local
// cluster whose Traefik forwards each provider's configuration at most every
// 3 s (providersThrottleDuration): the upstream_removed delay must move out
// to that period.
package slow
