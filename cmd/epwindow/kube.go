package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubectl's client flags: the same names, short forms and meanings as
// k8s.io/cli-runtime's genericclioptions.ConfigFlags.AddFlags, which is
// what kubectl, stern and kubectl plugins register. flagNamespace
// (manifests.go) is kubectl's -n/--namespace.
const (
	flagKubeconfig     = "kubeconfig"
	flagContext        = "context"
	flagKubeCluster    = "cluster"
	flagUser           = "user"
	flagAs             = "as"
	flagAsGroup        = "as-group"
	flagToken          = "token"
	flagServer         = "server"
	flagInsecure       = "insecure-skip-tls-verify"
	flagRequestTimeout = "request-timeout"
)

// kubeFlags are kubectl's client flags, for every subcommand that talks to
// a cluster. nsUsage says what -n means to that subcommand; the default
// namespace is the kubeconfig context's, as in kubectl.
func kubeFlags(nsUsage string) []cli.Flag {
	const cat = "Cluster (kubectl's flags)"
	return []cli.Flag{
		&cli.StringFlag{Name: flagKubeconfig, Usage: "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)", Category: cat},
		&cli.StringFlag{Name: flagContext, Usage: "kubeconfig context (default: the current context)", Category: cat},
		&cli.StringFlag{Name: flagKubeCluster, Usage: "kubeconfig cluster (default: the context's)", Category: cat},
		&cli.StringFlag{Name: flagUser, Usage: "kubeconfig user (default: the context's)", Category: cat},
		&cli.StringFlag{Name: flagNamespace, Aliases: []string{"n"}, Usage: nsUsage, Category: cat},
		&cli.StringFlag{Name: flagServer, Aliases: []string{"s"}, Usage: "address and port of the API server (overrides the kubeconfig cluster's)", Category: cat},
		&cli.StringFlag{Name: flagToken, Usage: "bearer token for the API server (overrides the kubeconfig user's credentials' token)", Category: cat},
		&cli.StringFlag{Name: flagAs, Usage: "user to impersonate (a user or system:serviceaccount:NS:NAME)", Category: cat},
		&cli.GenericFlag{Name: flagAsGroup, Value: &stringArray{}, Usage: "group to impersonate (repeatable; commas are part of the name)", Category: cat},
		&cli.BoolFlag{Name: flagInsecure, Usage: "do not check the API server's certificate (insecure)", Category: cat},
		&cli.StringFlag{Name: flagRequestTimeout, Value: "0", Usage: "give up on one API request after this long: 0 (never), an integer in seconds, or 1s, 2m, 3h; as in kubectl it also ends watches", Category: cat},
	}
}

// stringArray is a repeatable string flag that, like pflag's StringArray
// behind kubectl's --as-group, takes each value whole: urfave's
// StringSliceFlag would split "cn=ops,ou=eng" at the comma.
type stringArray []string

func (a *stringArray) Set(v string) error { *a = append(*a, v); return nil }
func (a *stringArray) String() string     { return strings.Join(*a, ",") }

// asGroups are the --as-group values, in order.
func asGroups(c *cli.Context) []string {
	if g, ok := c.Generic(flagAsGroup).(*stringArray); ok {
		return slices.Clone(*g)
	}
	return nil
}

// kubeError is a client flag or kubeconfig that cannot give a client, with
// the exit code it earns.
type kubeError struct {
	code int
	err  error
}

func (e *kubeError) Error() string { return e.err.Error() }
func (e *kubeError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error {
	return &kubeError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

func clusterErrorf(format string, a ...any) error {
	return &kubeError{code: exitCluster, err: fmt.Errorf(format, a...)}
}

// kubeExitCode is the exit code of an error from kube or kubeNamespace:
// exitUsage for a malformed flag value, else exitCluster.
func kubeExitCode(err error) int {
	if ke := (*kubeError)(nil); errors.As(err, &ke) {
		return ke.code
	}
	return exitCluster
}

// configFlags fills cli-runtime's ConfigFlags from the urfave flags, so
// that the kubeconfig, its overrides and the namespace are resolved by
// kubectl's own code. A flag a subcommand does not define stays at its
// zero value, which ConfigFlags treats as not given.
func configFlags(c *cli.Context) (*genericclioptions.ConfigFlags, error) {
	if s := c.String(flagRequestTimeout); s != "" {
		if _, err := clientcmd.ParseTimeout(s); err != nil {
			return nil, usageErrorf("--%s %q: want 0, an integer in seconds, or a duration such as 1s, 2m, 3h", flagRequestTimeout, s)
		}
	}
	if p := c.String(flagKubeconfig); p != "" {
		if _, err := os.Stat(p); err != nil {
			return nil, clusterErrorf("--%s %s: %w", flagKubeconfig, p, err)
		}
	}
	f := genericclioptions.NewConfigFlags(false)
	for p, name := range map[*string]string{
		f.KubeConfig: flagKubeconfig, f.Context: flagContext, f.ClusterName: flagKubeCluster,
		f.AuthInfoName: flagUser, f.Namespace: flagNamespace, f.APIServer: flagServer,
		f.BearerToken: flagToken, f.Impersonate: flagAs, f.Timeout: flagRequestTimeout,
	} {
		if v := stringFlag(c, name); v != "" {
			*p = v
		}
	}
	*f.ImpersonateGroup = asGroups(c)
	*f.Insecure = c.Bool(flagInsecure)
	return f, nil
}

// kubeNamespace is the namespace kubectl would use: -n, else the kubeconfig
// context's, else "default" (in a pod: its own). given reports -n.
func kubeNamespace(c *cli.Context) (ns string, given bool, err error) {
	f, err := configFlags(c)
	if err != nil {
		return "", false, err
	}
	ns, given, err = f.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", false, loadError(c, err)
	}
	return ns, given, nil
}

// kubeClient is what the client flags resolve to.
type kubeClient struct {
	config *rest.Config
	client kubernetes.Interface
	// context is the kubeconfig context used, for the results header.
	context string
	// namespace is kubeNamespace's; namespaceGiven reports -n.
	namespace      string
	namespaceGiven bool
}

// kube builds the client from kubectl's client flags. QPS/Burst are raised
// from client-go's 5/10: a run makes a few requests per trial plus
// pod-proxy reads, and throttling would delay the stamps of the stages it
// waits for.
func kube(c *cli.Context) (*kubeClient, error) {
	f, err := configFlags(c)
	if err != nil {
		return nil, err
	}
	loader := f.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, clusterErrorf("read kubeconfig (--%s or KUBECONFIG): %w", flagKubeconfig, err)
	}
	// kubectl says "context was not found"; name the flag and the choices.
	for _, ref := range []struct {
		flag string
		have []string
	}{
		{flagContext, slices.Collect(maps.Keys(raw.Contexts))},
		{flagKubeCluster, slices.Collect(maps.Keys(raw.Clusters))},
		{flagUser, slices.Collect(maps.Keys(raw.AuthInfos))},
	} {
		if n := stringFlag(c, ref.flag); n != "" && !slices.Contains(ref.have, n) {
			slices.Sort(ref.have)
			return nil, clusterErrorf("--%s %q is not in the kubeconfig (%ss: %v)", ref.flag, n, ref.flag, ref.have)
		}
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, loadError(c, err)
	}
	// With no kubeconfig kubectl falls back to http://localhost:8080 (or
	// in-cluster config in a pod); say what is missing instead of
	// "connection refused" later.
	if len(raw.Clusters) == 0 && c.String(flagServer) == "" && cfg.Host == clientcmd.ClusterDefaults.Server {
		return nil, errNoKubeconfig()
	}
	ns, given, err := loader.Namespace()
	if err != nil {
		return nil, loadError(c, err)
	}
	ctxName := raw.CurrentContext
	if n := c.String(flagContext); n != "" {
		ctxName = n
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "epwindow/" + version
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		if s := c.String(flagServer); s != "" {
			return nil, usageErrorf("--%s %q: %w", flagServer, s, err)
		}
		return nil, clusterErrorf("build client from kubeconfig: %w", err)
	}
	return &kubeClient{config: cfg, client: cs, context: ctxName, namespace: ns, namespaceGiven: given}, nil
}

func errNoKubeconfig() error {
	return clusterErrorf("no kubeconfig found: pass --%s, set KUBECONFIG, or give --%s", flagKubeconfig, flagServer)
}

// loadError explains a failure to turn the kubeconfig and flags into a
// client configuration.
func loadError(c *cli.Context, err error) error {
	switch {
	case clientcmd.IsEmptyConfig(err):
		return errNoKubeconfig()
	case c.String(flagAs) == "" && len(asGroups(c)) > 0:
		// client-go refuses groups without a user unless the kubeconfig
		// user impersonates one.
		return usageErrorf("--%s needs --%s (a user to impersonate): %w", flagAsGroup, flagAs, err)
	}
	return clusterErrorf("load kubeconfig (--%s, --%s): %w", flagKubeconfig, flagContext, err)
}

// stringFlag is the value of the subcommand's string flag name, or "" when
// it defines no such string flag: lint's --cluster is a switch of its own,
// whose "true" is no kubeconfig cluster.
func stringFlag(c *cli.Context, name string) string {
	if c.Command != nil {
		for _, f := range c.Command.Flags {
			if slices.Contains(f.Names(), name) {
				if _, ok := f.(*cli.StringFlag); !ok {
					return ""
				}
				break
			}
		}
	}
	return c.String(name)
}
