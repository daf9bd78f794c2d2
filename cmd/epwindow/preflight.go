package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure"
)

// preflight checks, before anything is created, everything that would make
// a run fail half-way: the API server answers, the caller holds every
// permission measure needs, the IngressClass exists (or, with an HTTPRoute,
// the Gateway exists and a controller accepted it), --url answers, and
// the in-cluster runners fit one per schedulable node. It
// returns the exit code that fits the first failure.
func preflight(ctx context.Context, cfg measure.Config) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cfg.Client.Discovery().ServerVersion(); err != nil {
		return exitCluster, fmt.Errorf("cannot reach the API server %s (check --%s / --%s): %w", cfg.RESTConfig.Host, flagKubeconfig, flagContext, err)
	}
	if cfg.Target.Deployment != "" {
		return preflightTarget(ctx, cfg)
	}
	if code, err := checkPermissions(ctx, cfg); err != nil {
		return code, err
	}
	if cfg.Route == measure.RouteHTTPRoute {
		if _, err := measure.CheckGateway(ctx, cfg.Client.Discovery(), cfg.Dynamic, cfg.Gateway); err != nil {
			return gatewayExitCode(err), err
		}
	}
	if class := cfg.IngressClass; class != "" {
		_, err := cfg.Client.NetworkingV1().IngressClasses().Get(ctx, class, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			have := "none"
			if list, lerr := cfg.Client.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{}); lerr == nil && len(list.Items) > 0 {
				var names []string
				for _, ic := range list.Items {
					names = append(names, ic.Name)
				}
				have = strings.Join(names, ", ")
			}
			return exitUsage, fmt.Errorf("--%s %q: no such IngressClass (the cluster has: %s)", measure.FlagIngressClass, class, have)
		}
		if err != nil {
			return exitCluster, fmt.Errorf("read IngressClass %q: %w", class, err)
		}
	}
	if err := urlAnswers(ctx, cfg); err != nil {
		return exitUsage, err
	}
	// One runner per node: more runners than schedulable nodes is bad
	// input. Without permission to list nodes (no variant grants it: it is
	// cluster-wide) the run learns it from the scheduler instead.
	if _, err := measure.CheckRunnerNodes(ctx, cfg.Client, cfg.InClusterLoad); err != nil {
		var fe *measure.FlagError
		if errors.As(err, &fe) {
			return exitUsage, err
		}
		return exitCluster, err
	}
	return exitOK, nil
}

// gatewayExitCode maps measure.CheckGateway's errors to exit codes: a
// Gateway that does not exist is bad input, one nobody can route through
// (no CRDs, no class, no controller's acceptance) an unusable cluster.
func gatewayExitCode(err error) int {
	var fe *measure.FlagError
	switch {
	case errors.As(err, &fe):
		return exitUsage
	case apierrors.IsForbidden(err):
		return exitForbidden
	}
	return exitCluster
}

// checkPermissions checks what the run needs, for its route: cluster-wide
// when it creates its own namespace; in --namespace, the namespaced variant
// there, and that the namespace exists.
func checkPermissions(ctx context.Context, cfg measure.Config) (int, error) {
	ns, perms, manifest := "", deploy.PermissionsFor(true, cfg.Route, cfg.Gateway), "deploy/rbac/cluster"
	if cfg.Namespace != "" {
		ns, perms, manifest = cfg.Namespace, deploy.PermissionsFor(false, cfg.Route, cfg.Gateway), "deploy/rbac/namespaced"
	}
	missing, err := deploy.Check(ctx, cfg.Client.AuthorizationV1(), ns, perms)
	if err != nil {
		return exitCluster, fmt.Errorf("check permissions: %w", err)
	}
	if len(missing) > 0 {
		return exitForbidden, &deploy.MissingError{Missing: missing, Manifest: manifest, Namespace: ns}
	}
	if cfg.Namespace == "" {
		return exitOK, nil
	}
	// Permissions in a namespace that does not exist can be granted (a
	// ClusterRole bound cluster-wide); a server-side dry run of a create
	// there finds out, and creates nothing.
	probe := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "epwindow-preflight-"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: deploy.DefaultPort}}},
	}
	_, err = cfg.Client.CoreV1().Services(cfg.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case apierrors.IsNotFound(err):
		return exitUsage, fmt.Errorf("--%s %s: no such namespace (it must exist; an administrator creates it, e.g. with kubectl apply -k deploy/rbac/namespaced)", measure.FlagNamespace, cfg.Namespace)
	case apierrors.IsForbidden(err):
		// Admission (a quota, a policy) refuses what the run would create.
		return exitForbidden, fmt.Errorf("--%s %s: creating a Service there is refused: %w", measure.FlagNamespace, cfg.Namespace, err)
	case err != nil:
		return exitCluster, fmt.Errorf("--%s %s: dry-run create of a Service: %w", measure.FlagNamespace, cfg.Namespace, err)
	}
	return exitOK, nil
}

// urlAnswers sends one request to --url: any HTTP answer (404 from an
// ingress that has no rule for the host yet is the usual one) proves the
// load will reach the ingress; a refused or timed-out connection does not.
func urlAnswers(ctx context.Context, cfg measure.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL.String(), nil)
	if err != nil {
		return fmt.Errorf("--%s %s: %w", measure.FlagURL, cfg.URL, err)
	}
	req.Host = cfg.Host
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	resp, err := client.Do(req)
	if err != nil {
		var hint string
		if errors.Is(err, context.DeadlineExceeded) {
			hint = " (no answer in 5s)"
		}
		return fmt.Errorf("--%s %s does not answer%s: %w; it must be the ingress as reachable from this machine", measure.FlagURL, cfg.URL, hint, err)
	}
	resp.Body.Close()
	return nil
}

// preflightTarget is preflight for measure --target: every permission the
// run needs in the Deployment's namespace (deploy/rbac/target), named
// before the Deployment is patched, and --url answers when load is sent.
func preflightTarget(ctx context.Context, cfg measure.Config) (int, error) {
	perms := deploy.TargetPermissions(cfg.Route, cfg.Gateway)
	missing, err := deploy.Check(ctx, cfg.Client.AuthorizationV1(), cfg.Namespace, perms)
	if err != nil {
		return exitCluster, fmt.Errorf("check permissions: %w", err)
	}
	if len(missing) > 0 {
		return exitForbidden, &deploy.MissingError{Missing: missing, Manifest: "deploy/rbac/target", Namespace: cfg.Namespace}
	}
	if cfg.URL == nil {
		return exitOK, nil
	}
	if err := urlAnswers(ctx, cfg); err != nil {
		return exitUsage, err
	}
	return exitOK, nil
}
