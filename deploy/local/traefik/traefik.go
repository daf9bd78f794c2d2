package traefik

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/epwindow/epwindow/deploy/local/internal/child"
	"github.com/epwindow/epwindow/deploy/local/internal/freeport"
)

// Config says how to run Traefik against the local API server.
type Config struct {
	// Binary is the traefik executable (bin/traefik from `make cluster`).
	Binary string
	// APIServerURL is https://127.0.0.1:PORT.
	APIServerURL string
	// CAFile verifies the API server.
	CAFile string
	// TokenFile holds the bearer token Traefik sends.
	TokenFile string
	// Throttle is providers.providersThrottleDuration: each Kubernetes
	// provider's configurations reach the router at most once per Throttle
	// (pkg/provider/aggregator/aggregator.go, maybeThrottledProvide: send,
	// then sleep; a ring channel keeps only the newest message meanwhile).
	// Traefik's default is 2s; zero is passed through and turns it off.
	Throttle time.Duration
	// LogFile receives Traefik's stdout and stderr.
	LogFile string
}

// Traefik is a running Traefik child process.
type Traefik struct {
	// URL is the web entry point, http://127.0.0.1:PORT. Ingresses of
	// both Ingress providers and the Gateway's listener are served there.
	URL string
	// Port is URL's port: a Gateway listener for Traefik must name it
	// (the Gateway provider maps a listener to the entry point with the
	// same port: entryPointName in pkg/provider/kubernetes/gateway/kubernetes.go).
	Port int
	// HTTPSURL is the websecure entry point, https://127.0.0.1:PORT: TLS
	// on every router (entryPoints.websecure.http.tls), each Ingress's
	// spec.tls Secrets as certificates chosen by the client's server name,
	// else Traefik's own self-signed default certificate.
	HTTPSURL string
	// APIURL is the API's root, http://127.0.0.1:PORT (…/api/http/services,
	// …/api/version); the observer's --observer-url.
	APIURL string

	*child.Process
}

// The Kubernetes providers Traefik runs here, by their static-config names.
const (
	ProviderIngress      = "kubernetesIngress"
	ProviderGateway      = "kubernetesGateway"
	ProviderIngressNGINX = "kubernetesIngressNGINX"
)

// Args are Traefik's flags for cfg on the given loopback ports. Every
// listener is on 127.0.0.1: the web entry point, the websecure (TLS) entry
// point, and the "traefik" entry point that serves the API (api.insecure)
// and /ping. Version checks and usage reports, which call out to the
// internet, are off.
//
// websecure: an Ingress without the router.entrypoints annotation is routed
// on every entry point, and entryPoints.websecure.http.tls turns TLS on for
// the routers there. The Ingress provider puts each Ingress's spec.tls
// Secrets (tls.crt, tls.key) into the default TLS store, not onto a router
// (getCertificates and loadRouter in pkg/provider/kubernetes/ingress/
// kubernetes.go, v3.6.12): the certificate is picked by SNI for any router.
func Args(cfg Config, webPort, httpsPort, apiPort int) []string {
	args := []string{
		"--entryPoints.web.address=127.0.0.1:" + strconv.Itoa(webPort),
		"--entryPoints.websecure.address=127.0.0.1:" + strconv.Itoa(httpsPort),
		"--entryPoints.websecure.http.tls=true",
		"--entryPoints.traefik.address=127.0.0.1:" + strconv.Itoa(apiPort),
		// A stop waits for requests in flight at most 1 s (default 10 s).
		"--entryPoints.web.transport.lifeCycle.graceTimeOut=1s",
		"--entryPoints.websecure.transport.lifeCycle.graceTimeOut=1s",
		"--entryPoints.traefik.transport.lifeCycle.graceTimeOut=1s",
		"--api.insecure=true",
		"--api.dashboard=false",
		"--ping=true",
		"--global.checkNewVersion=false",
		"--global.sendAnonymousUsage=false",
		"--log.level=INFO",
		"--log.noColor=true",
		"--providers.providersThrottleDuration=" + cfg.Throttle.String(),
	}
	for _, p := range []string{ProviderIngress, ProviderGateway, ProviderIngressNGINX} {
		pre := "--providers." + p
		args = append(args, pre+"=true",
			pre+".endpoint="+cfg.APIServerURL,
			pre+".token="+cfg.TokenFile,
			pre+".certAuthFilePath="+cfg.CAFile)
	}
	return args
}

// Start runs Traefik and returns once its API and ping answer and its web
// entry point accepts connections. Ports are picked free just before use;
// if Traefik exits at once (a port taken meanwhile), it is retried on new
// ports. Traefik is killed if this process dies (Pdeathsig).
func Start(ctx context.Context, cfg Config) (*Traefik, error) {
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("traefik binary: %w (run make cluster)", err)
	}
	if cfg.Throttle < 0 {
		return nil, fmt.Errorf("traefik throttle (%s) must not be negative", cfg.Throttle)
	}
	return child.Retry(ctx, 3, func() (*Traefik, error) { return start(ctx, cfg) })
}

func start(ctx context.Context, cfg Config) (*Traefik, error) {
	ports, err := freeport.Loopback(3)
	if err != nil {
		return nil, err
	}
	proc, err := child.Launch(cfg.Binary, Args(cfg, ports[0], ports[1], ports[2]), cfg.LogFile)
	if err != nil {
		return nil, err
	}
	t := &Traefik{
		URL:      fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		Port:     ports[0],
		HTTPSURL: fmt.Sprintf("https://127.0.0.1:%d", ports[1]),
		APIURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		Process:  proc,
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	if err := proc.WaitReady(ctx, "traefik", "traefik.log", 50*time.Millisecond, 30*time.Second, func() bool {
		return child.HTTPOK(ctx, client, t.APIURL+"/ping") && child.HTTPOK(ctx, client, t.APIURL+"/api/version") && child.Accepts(t.URL) && child.Accepts(t.HTTPSURL)
	}); err != nil {
		return nil, err
	}
	return t, nil
}
