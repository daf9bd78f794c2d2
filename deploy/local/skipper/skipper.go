package skipper

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

// Config says how to run Skipper against the local API server.
type Config struct {
	// Binary is the skipper executable (bin/skipper from `make cluster`).
	Binary string
	// APIServerURL is https://127.0.0.1:PORT.
	APIServerURL string
	// CAFile verifies the API server (passed as SSL_CERT_FILE).
	CAFile string
	// TokenFile holds the bearer token Skipper sends.
	TokenFile string
	// PollInterval is -source-poll-timeout: how often Skipper lists
	// Ingresses, Services and EndpointSlices. Skipper's default is 3s.
	PollInterval time.Duration
	// LogFile receives Skipper's stdout and stderr.
	LogFile string
}

// Skipper is a running Skipper child process.
type Skipper struct {
	// URL is the proxy listener, http://127.0.0.1:PORT.
	URL string
	// RoutesURL is the support listener's route table,
	// http://127.0.0.1:PORT/routes (JSON with Accept: application/json).
	RoutesURL string

	*child.Process
}

// Args are Skipper's flags for cfg on the given loopback ports. Every
// listener Skipper opens by default (-address :9090, -support-listener and
// -metrics-listener :9911) is pointed at 127.0.0.1; the others it has
// (debug, validation webhook, swarm) are off by default.
func Args(cfg Config, proxyPort, supportPort int) []string {
	support := "127.0.0.1:" + strconv.Itoa(supportPort)
	return []string{
		"-address=127.0.0.1:" + strconv.Itoa(proxyPort),
		"-support-listener=" + support,
		"-metrics-listener=" + support,
		"-kubernetes",
		"-kubernetes-url=" + cfg.APIServerURL,
		"-kubernetes-token-file=" + cfg.TokenFile,
		// Class "skipper"; Ingresses without a class are served too
		// (dataclients/kubernetes/clusterclient.go, ingress filter).
		"-kubernetes-ingress-class=^skipper$",
		"-enable-kubernetes-endpointslices",
		"-kubernetes-https-redirect=false",
		"-source-poll-timeout=" + strconv.FormatInt(cfg.PollInterval.Milliseconds(), 10),
		// The default (45s) keeps the listeners open after SIGTERM for a
		// load balancer that does not exist here.
		"-wait-for-healthcheck-interval=0",
		// Do not open the proxy port before the first route table is in.
		"-wait-first-route-load",
		"-access-log-disabled",
		// Skipper proxies an Upgrade (WebSocket) request only with this on
		// (config/config.go ExperimentalUpgrade; proxy/proxy.go hands such
		// requests to its upgradeProxy): epwindow measure --streams
		// --stream-protocol websocket needs it.
		"-experimental-upgrade",
	}
}

// Start runs Skipper and returns once its route table answers and its proxy
// port accepts connections. Ports are picked free just before use; if
// Skipper exits at once (a port taken meanwhile), it is retried on new ports.
// Skipper is killed if this process dies (Pdeathsig), so a crash leaves no
// orphan holding the ports.
func Start(ctx context.Context, cfg Config) (*Skipper, error) {
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("skipper binary: %w (run make cluster)", err)
	}
	if cfg.PollInterval < time.Millisecond {
		return nil, fmt.Errorf("--ingress-poll (%s) must be at least 1ms", cfg.PollInterval)
	}
	return child.Retry(ctx, 3, func() (*Skipper, error) { return start(ctx, cfg) })
}

func start(ctx context.Context, cfg Config) (*Skipper, error) {
	ports, err := freeport.Loopback(2)
	if err != nil {
		return nil, err
	}
	proc, err := child.Launch(cfg.Binary, Args(cfg, ports[0], ports[1]), cfg.LogFile, "SSL_CERT_FILE="+cfg.CAFile)
	if err != nil {
		return nil, err
	}
	s := &Skipper{
		URL:       fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		RoutesURL: fmt.Sprintf("http://127.0.0.1:%d/routes", ports[1]),
		Process:   proc,
	}
	client := &http.Client{Timeout: time.Second}
	if err := proc.WaitReady(ctx, "skipper", "skipper.log", 50*time.Millisecond, 30*time.Second, func() bool {
		return child.HTTPOK(ctx, client, s.RoutesURL) && child.Accepts(s.URL)
	}); err != nil {
		return nil, err
	}
	return s, nil
}
