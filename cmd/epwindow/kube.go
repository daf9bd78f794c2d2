package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	flagKubeconfig = "kubeconfig"
	flagContext    = "context"
)

// kubeFlags are kubectl's: --kubeconfig, --context, and KUBECONFIG.
func kubeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagKubeconfig, Usage: "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)", Category: "Cluster"},
		&cli.StringFlag{Name: flagContext, Usage: "kubeconfig context (default: the current context)", Category: "Cluster"},
	}
}

// kube loads the client configuration the way kubectl does and returns it,
// a clientset, and the context name. QPS/Burst are raised from client-go's
// 5/10: a run makes a few requests per trial plus pod-proxy reads, and
// throttling would delay the stamps of the stages it waits for.
func kube(c *cli.Context) (*rest.Config, kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if p := c.String(flagKubeconfig); p != "" {
		if _, err := os.Stat(p); err != nil {
			return nil, nil, "", fmt.Errorf("--%s %s: %w", flagKubeconfig, p, err)
		}
		rules.ExplicitPath = p
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c.String(flagContext)}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("read kubeconfig (--%s or KUBECONFIG): %w", flagKubeconfig, err)
	}
	ctxName := raw.CurrentContext
	if n := c.String(flagContext); n != "" {
		if _, ok := raw.Contexts[n]; !ok {
			return nil, nil, "", fmt.Errorf("--%s %q is not in the kubeconfig (contexts: %v)", flagContext, n, contextNames(raw.Contexts))
		}
		ctxName = n
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, nil, "", errors.New("no kubeconfig found: pass --kubeconfig or set KUBECONFIG")
		}
		return nil, nil, "", fmt.Errorf("load kubeconfig (--%s, --%s): %w", flagKubeconfig, flagContext, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "epwindow/" + version
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("build client from kubeconfig: %w", err)
	}
	return cfg, cs, ctxName, nil
}

func contextNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
