package controlplane

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// Config says where the control plane keeps its files and how its
// controllers behave.
type Config struct {
	// Dir holds the kubeconfigs, pki/, etcd data and one log file per
	// component. It must exist.
	Dir string
	// BatchPeriod is kube-controller-manager's
	// --endpointslice-updates-batch-period (0 = the Kubernetes default).
	BatchPeriod time.Duration
	// MaxEndpointsPerSlice is kube-controller-manager's
	// --max-endpoints-per-slice (0 = the Kubernetes default, 100): small
	// values spread a Service over many slices with few pods.
	MaxEndpointsPerSlice int
}

// ControlPlane is a running etcd + kube-apiserver + kube-controller-manager +
// kube-scheduler, all in this process.
type ControlPlane struct {
	// URL is the API server's address, https://127.0.0.1:PORT.
	URL string
	// PKI names the credential files; PKI.CAFile verifies URL.
	PKI *PKI
	// Kubeconfig is DIR/kubeconfig: user "admin" (system:masters), client
	// certificate.
	Kubeconfig string
	// RestrictedKubeconfig is DIR/kubeconfig-restricted: user "restricted",
	// bearer token, no RBAC bindings (only what system:authenticated gets).
	RestrictedKubeconfig string
	// CoreDNSKubeconfig is DIR/kubeconfig-coredns: user "coredns", which
	// the cluster binds to the ClusterRole system:coredns (read Services,
	// EndpointSlices, Namespaces), as kubeadm binds CoreDNS's account.
	CoreDNSKubeconfig string
	// RestConfig is the admin client configuration.
	RestConfig *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface

	cancel  context.CancelFunc
	etcd    *embed.Etcd
	apiErr  <-chan error
	wg      sync.WaitGroup
	logs    []io.Closer
	errOnce sync.Once
	err     chan error
}

// Start brings the control plane up and returns once the API server answers
// /readyz; the controllers and scheduler start right after and catch up
// through their informers. Stop undoes everything Start did.
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, retErr error) {
	cp := &ControlPlane{err: make(chan error, 1)}
	defer func() {
		if retErr != nil {
			cp.Stop()
		}
	}()

	apiLog, err := cp.openLog(filepath.Join(cfg.Dir, "apiserver.log"))
	if err != nil {
		return nil, err
	}
	// kube-apiserver logs through klog's global logger; the controllers and
	// the scheduler take a contextual logger each, so their lines go to their
	// own files.
	// Errors too: by default klog copies them to stderr.
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	if err := kfs.Parse([]string{"-logtostderr=false", "-alsologtostderr=false", "-stderrthreshold=FATAL"}); err != nil {
		return nil, err
	}
	klog.SetOutput(apiLog)

	if cp.PKI, err = newPKI(filepath.Join(cfg.Dir, "pki")); err != nil {
		return nil, err
	}
	var etcdURL string
	cp.etcd, etcdURL, err = startEtcd(filepath.Join(cfg.Dir, "etcd"), filepath.Join(cfg.Dir, "etcd.log"))
	if err != nil {
		return nil, err
	}

	ln, port, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	cp.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cp.cancel = cancel
	if _, cp.apiErr, err = runAPIServer(runCtx, ln, apiserverArgs(cp.PKI, etcdURL)); err != nil {
		ln.Close()
		return nil, err
	}

	cp.Kubeconfig = filepath.Join(cfg.Dir, "kubeconfig")
	cp.RestrictedKubeconfig = filepath.Join(cfg.Dir, "kubeconfig-restricted")
	if err := writeKubeconfig(cp.Kubeconfig, cp.URL, cp.PKI.CAFile, "admin", &clientcmdapi.AuthInfo{
		ClientCertificate: cp.PKI.AdminCertFile, ClientKey: cp.PKI.AdminKeyFile,
	}); err != nil {
		return nil, err
	}
	if err := writeKubeconfig(cp.RestrictedKubeconfig, cp.URL, cp.PKI.CAFile, "restricted", &clientcmdapi.AuthInfo{
		Token: cp.PKI.RestrictedToken,
	}); err != nil {
		return nil, err
	}
	cp.CoreDNSKubeconfig = filepath.Join(cfg.Dir, "kubeconfig-coredns")
	if err := writeKubeconfig(cp.CoreDNSKubeconfig, cp.URL, cp.PKI.CAFile, "coredns", &clientcmdapi.AuthInfo{
		Token: cp.PKI.CoreDNSToken,
	}); err != nil {
		return nil, err
	}
	if cp.RestConfig, err = clientcmd.BuildConfigFromFlags("", cp.Kubeconfig); err != nil {
		return nil, fmt.Errorf("load %s: %w", cp.Kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cp.RestConfig)
	if err != nil {
		return nil, err
	}
	cp.Client = cs
	if err := cp.waitReady(ctx, cs, 60*time.Second); err != nil {
		return nil, err
	}

	kcmLog, err := cp.openLog(filepath.Join(cfg.Dir, "controller-manager.log"))
	if err != nil {
		return nil, err
	}
	schedLog, err := cp.openLog(filepath.Join(cfg.Dir, "scheduler.log"))
	if err != nil {
		return nil, err
	}
	cp.goRun("kube-controller-manager", func() error {
		lctx := klog.NewContext(runCtx, textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(kcmLog))))
		return runControllerManager(lctx, controllerManagerArgs(cp.PKI, cp.Kubeconfig, cfg.BatchPeriod, cfg.MaxEndpointsPerSlice))
	})
	cp.goRun("kube-scheduler", func() error {
		lctx := klog.NewContext(runCtx, textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(schedLog))))
		return runScheduler(lctx, cp.Kubeconfig)
	})
	return cp, nil
}

// Err delivers the first error of a component that stopped on its own.
func (cp *ControlPlane) Err() <-chan error { return cp.err }

func (cp *ControlPlane) fail(err error) {
	cp.errOnce.Do(func() { cp.err <- err })
}

func (cp *ControlPlane) goRun(name string, run func() error) {
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		if err := run(); err != nil {
			cp.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

func (cp *ControlPlane) openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	cp.logs = append(cp.logs, f)
	return f, nil
}

func (cp *ControlPlane) waitReady(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%w: %s", err, body)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-cp.apiErr:
			return fmt.Errorf("kube-apiserver stopped while starting (see apiserver.log): %w", err)
		case <-deadline.C:
			return fmt.Errorf("kube-apiserver not ready after %s (see apiserver.log): %w", timeout, last)
		case <-tick.C:
		}
	}
}

// Stop stops the controllers, the scheduler and the API server, then etcd
// (in that order: the API server needs etcd to shut down cleanly).
func (cp *ControlPlane) Stop() {
	if cp.cancel != nil {
		cp.cancel()
		cp.wg.Wait()
		if cp.apiErr != nil {
			select {
			case err := <-cp.apiErr:
				if err != nil && !errors.Is(err, context.Canceled) {
					klog.ErrorS(err, "kube-apiserver stopped with an error")
				}
			case <-time.After(30 * time.Second):
				klog.Error("kube-apiserver did not stop within 30s")
			}
		}
	}
	if cp.etcd != nil {
		cp.etcd.Close()
	}
	klog.Flush()
	for _, l := range cp.logs {
		l.Close()
	}
}

// writeKubeconfig writes a one-cluster, one-user kubeconfig.
func writeKubeconfig(path, server, caFile, user string, auth *clientcmdapi.AuthInfo) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	// Embed the files' contents so the kubeconfig works from any directory.
	if auth.ClientCertificate != "" {
		if auth.ClientCertificateData, err = os.ReadFile(auth.ClientCertificate); err != nil {
			return err
		}
		if auth.ClientKeyData, err = os.ReadFile(auth.ClientKey); err != nil {
			return err
		}
		auth.ClientCertificate, auth.ClientKey = "", ""
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["epwindow-local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["epwindow-local"] = &clientcmdapi.Context{Cluster: "epwindow-local", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "epwindow-local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
