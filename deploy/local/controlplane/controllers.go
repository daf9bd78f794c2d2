package controlplane

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// Controllers are the kube-controller-manager controllers a Deployment
// rollout needs, and those epwindow's in-cluster schedule needs: a CronJob
// makes Jobs, a Job makes its pod, and the history's PersistentVolumeClaim
// binds to one of the PersistentVolumes `up` creates. The node-lifecycle
// controller is left out on purpose: the node agent keeps Nodes Ready
// itself, and nothing here needs eviction.
var Controllers = []string{
	"endpointslice-controller",
	"deployment-controller",
	"replicaset-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"job-controller",
	"cronjob-controller",
	"persistentvolume-binder-controller",
}

func controllerManagerArgs(p *PKI, kubeconfig string, batchPeriod time.Duration, maxPerSlice int) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(Controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file=" + p.ServiceAccountKeyFile,
		"--root-ca-file=" + p.CAFile,
		// The injected delay epwindow's measurement must find: the
		// EndpointSlice controller holds pod changes this long
		// (pkg/controller/endpointslice/endpointslice_controller.go).
		"--endpointslice-updates-batch-period=" + batchPeriod.String(),
	}
	if maxPerSlice > 0 {
		// How many endpoints one slice holds before the controller starts
		// another (pkg/controller/endpointslice/config: 1 to 1000, default
		// 100): production Services span many slices.
		args = append(args, "--max-endpoints-per-slice="+strconv.Itoa(maxPerSlice))
	}
	return args
}

// runControllerManager runs kube-controller-manager's Run with the given
// flags (cmd/kube-controller-manager/app/controllermanager.go, minus cobra
// and signals) until ctx ends.
func runControllerManager(ctx context.Context, args []string) error {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return fmt.Errorf("kube-controller-manager options: %w", err)
	}
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range s.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()).FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	c, err := s.Config(ctx, kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err != nil {
		return fmt.Errorf("kube-controller-manager config: %w", err)
	}
	return kcmapp.Run(ctx, c.Complete())
}

// runScheduler runs kube-scheduler with the given flags
// (cmd/kube-scheduler/app/server.go Setup + Run) until ctx ends.
func runScheduler(ctx context.Context, kubeconfig string) error {
	opts := schedoptions.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse([]string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}); err != nil {
		return fmt.Errorf("kube-scheduler flags: %w", err)
	}
	cc, sched, err := schedapp.Setup(ctx, opts)
	if err != nil {
		return fmt.Errorf("kube-scheduler setup: %w", err)
	}
	return schedapp.Run(ctx, cc, sched)
}
