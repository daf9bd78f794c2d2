package verify

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Flag names, for the messages that tell which flag to change.
const (
	FlagNamespace          = "namespace"
	FlagURL                = "url"
	FlagHost               = "host"
	FlagPath               = "path"
	FlagMethod             = "method"
	FlagBody               = "body"
	FlagRate               = "rate"
	FlagRollouts           = "rollouts"
	FlagWatch              = "watch"
	FlagTimeout            = "timeout"
	FlagMaxFailures        = "max-failures"
	FlagCheckPort          = "check-port"
	FlagSelfTest           = "self-test"
	FlagAllowSingleReplica = "allow-single-replica"
	FlagWindowFrom         = "window-from"
	FlagIngressClass       = "ingress-class"
	FlagImage              = "image"
	FlagLoadTimeout        = "load-timeout"
	FlagIngressCA          = "ingress-ca"
	FlagIngressInsecure    = "ingress-insecure"
	FlagAllowExitCodes     = "allow-exit-codes"
	FlagRouteCheck         = "route-check"
	FlagSidecar            = "sidecar"
)

// CheckPort is --check-port PORT[/PATH]: the container port read through the
// API server's pod proxy, and the path requested there.
type CheckPort struct {
	Port int32
	Path string
}

// ParseCheckPort reads PORT or PORT/PATH; the path defaults to "/".
func ParseCheckPort(s string) (*CheckPort, error) {
	port, path, _ := strings.Cut(s, "/")
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > math.MaxUint16 {
		return nil, fmt.Errorf("--%s %q: want PORT or PORT/PATH with PORT 1-65535, e.g. 8080/healthz", FlagCheckPort, s)
	}
	return &CheckPort{Port: int32(n), Path: "/" + path}, nil
}

// String is the flag's form.
func (c CheckPort) String() string { return strconv.Itoa(int(c.Port)) + c.Path }

// Config is one verify run.
type Config struct {
	Client kubernetes.Interface
	// Dynamic reads HTTPRoutes for the route check (nil: Ingresses only).
	Dynamic dynamic.Interface
	// Namespace and Deployment name the team's Deployment.
	Namespace, Deployment string
	// URL is the ingress as reachable from here, with --path applied; Host
	// the Host header (--host).
	URL  *url.URL
	Host string
	// Method is GET or POST; Body what a POST carries.
	Method, Body string
	Rate         float64
	LoadTimeout  time.Duration
	// Rollouts is how many rollouts to run (or, with Watch, to wait for).
	Rollouts int
	Watch    bool
	// Timeout bounds each rollout: from the restart (or, with Watch, from
	// the start of the wait) to completion.
	Timeout     time.Duration
	MaxFailures int
	CheckPort   *CheckPort
	// SelfTest runs the broken canary first; SelfTestImage is its image
	// and IngressClass its class ("" = the class of the Ingress that routes
	// to the Deployment, else the cluster's default).
	SelfTest      bool
	SelfTestImage string
	IngressClass  string
	// AllowSingleReplica lets a Deployment with one ready replica be
	// rolled (every rollout then has a moment with no old pod serving).
	AllowSingleReplica bool
	// Window is the propagation window from a measure results file
	// (--window-from), for the shape estimate; 0 = unknown.
	Window       time.Duration
	WindowSource string
	// TLS is how an https --url is reached (--ingress-ca,
	// --ingress-insecure); the server name is the Host header (load.Config).
	TLS *tls.Config
	// AllowExitCodes are non-zero exit codes of replaced containers that
	// do not fail the gate (--allow-exit-codes, e.g. 143 for an app that
	// exits by the default SIGTERM action). 137 and OOMKilled always fail.
	AllowExitCodes []int32
	// NoRouteCheck skips the check that the route of --host/--path leads
	// to a Service selecting the Deployment's pods (--route-check=false).
	NoRouteCheck bool
	// Sidecar reads each replaced pod's window from the epwindow sidecar
	// its Deployment keeps (--sidecar; deploy.TemplateSidecar): reported
	// beside the failures, never judged.
	Sidecar bool
	// PollInterval is the pod-proxy poll of --check-port (0 = 100ms).
	PollInterval time.Duration
	Clock        clock.Clock
}

// Validate checks the configuration; messages name the flag to change.
func (c Config) Validate() error {
	var errs []error
	if errs1 := validation.IsDNS1123Label(c.Namespace); len(errs1) > 0 {
		errs = append(errs, fmt.Errorf("--%s %q: %s", FlagNamespace, c.Namespace, strings.Join(errs1, "; ")))
	}
	if errs1 := validation.IsDNS1123Subdomain(c.Deployment); len(errs1) > 0 {
		errs = append(errs, fmt.Errorf("DEPLOYMENT %q: %s", c.Deployment, strings.Join(errs1, "; ")))
	}
	switch {
	case c.URL == nil:
		errs = append(errs, fmt.Errorf("--%s is required: the ingress as reachable from here, e.g. http://127.0.0.1:8080", FlagURL))
	case c.URL.Scheme != "http" && c.URL.Scheme != "https", c.URL.Host == "":
		errs = append(errs, fmt.Errorf("--%s %q: want http(s)://HOST[:PORT]", FlagURL, c.URL))
	}
	if c.Method != http.MethodGet && c.Method != http.MethodPost {
		errs = append(errs, fmt.Errorf("--%s %q: want GET or POST", FlagMethod, c.Method))
	}
	if c.Body != "" && c.Method != http.MethodPost {
		errs = append(errs, fmt.Errorf("--%s needs --%s POST", FlagBody, FlagMethod))
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate <= 0 {
		errs = append(errs, fmt.Errorf("--%s (%v) must be a positive number of requests per second", FlagRate, c.Rate))
	}
	if c.LoadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--%s (%s) must be positive", FlagLoadTimeout, c.LoadTimeout))
	}
	if c.Rollouts < 1 {
		errs = append(errs, fmt.Errorf("--%s (%d) must be at least 1", FlagRollouts, c.Rollouts))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--%s (%s) must be positive", FlagTimeout, c.Timeout))
	}
	if c.MaxFailures < 0 {
		errs = append(errs, fmt.Errorf("--%s (%d) must not be negative", FlagMaxFailures, c.MaxFailures))
	}
	if c.SelfTest && strings.TrimSpace(c.SelfTestImage) == "" {
		errs = append(errs, fmt.Errorf("--%s must name the probe image for the self-test (or --%s=false)", FlagImage, FlagSelfTest))
	}
	if c.IngressClass != "" {
		if errs1 := validation.IsDNS1123Subdomain(c.IngressClass); len(errs1) > 0 {
			errs = append(errs, fmt.Errorf("--%s %q: %s", FlagIngressClass, c.IngressClass, strings.Join(errs1, "; ")))
		}
	}
	for _, code := range c.AllowExitCodes {
		if code == 137 || code == 0 {
			errs = append(errs, fmt.Errorf("--%s %d: 137 (SIGKILL: the grace period ran out, or out of memory) always fails the gate, and 0 is no failure", FlagAllowExitCodes, code))
		}
	}
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("--%s: negative window %s", FlagWindowFrom, c.Window))
	}
	return errors.Join(errs...)
}

func (c Config) pollInterval() time.Duration {
	if c.PollInterval > 0 {
		return c.PollInterval
	}
	return 100 * time.Millisecond
}

// ParseExitCodes reads --allow-exit-codes: comma-separated exit codes 1-255.
func ParseExitCodes(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 255 {
			return nil, fmt.Errorf("--%s %q: want exit codes 1-255, comma-separated, e.g. 143", FlagAllowExitCodes, s)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

// IngressTLS is the TLS configuration for an https --url: the CA of
// --ingress-ca (PEM), or no verification with --ingress-insecure, or nil
// (the system roots). The server name (SNI) is --host, set by the load
// generator. Either flag with an http URL is an error: it would do nothing.
func IngressTLS(caFile string, insecure bool, u *url.URL) (*tls.Config, error) {
	if caFile == "" && !insecure {
		return nil, nil
	}
	if u != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("--%s and --%s are for an https --%s; %s is not", FlagIngressCA, FlagIngressInsecure, FlagURL, u)
	}
	if caFile != "" && insecure {
		return nil, fmt.Errorf("--%s and --%s: choose one", FlagIngressCA, FlagIngressInsecure)
	}
	if insecure {
		return &tls.Config{InsecureSkipVerify: true}, nil //nolint:gosec // asked for by --ingress-insecure
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", FlagIngressCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--%s %s: no PEM certificate in it", FlagIngressCA, caFile)
	}
	return &tls.Config{RootCAs: pool}, nil
}
