package deploy

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// ScheduleDir is the kustomization of the in-cluster schedule.
const ScheduleDir = "schedule"

// Names of the schedule's objects in its namespace.
const (
	ScheduleName = "epwindow-measure"
	// HistoryClaim is the PersistentVolumeClaim of the history.
	HistoryClaim = "epwindow-history"
	// HistoryMountPath is where the run's container mounts the history
	// volume: measure --history writes there.
	HistoryMountPath = "/var/lib/epwindow/history"
	// HistoryServerName is the Deployment (and its pods' name label)
	// serving the history's metrics, which deploy/monitoring's PodMonitor
	// selects.
	HistoryServerName = "epwindow-history"
	// scheduleRole names the Role and RoleBinding; the ClusterRole and
	// ClusterRoleBinding add the namespace, being cluster-wide. Names of
	// their own, so that applying the schedule does not rebind the
	// namespaced variant's epwindow-measure roles (deploy/rbac/namespaced)
	// to the ServiceAccount, and deleting it does not remove them.
	scheduleRole = "epwindow-schedule"
)

// DefaultHistorySize is the history volume's request: a run of 10 trials
// writes some 100 KiB, so a GiB holds thousands of runs.
var DefaultHistorySize = resource.MustParse("1Gi")

// ScheduleParams are the values of the in-cluster schedule.
type ScheduleParams struct {
	// Namespace holds everything, the probe workload of each run included.
	Namespace string
	// Schedule is the CronJob's spec.schedule.
	Schedule string
	// Image runs measure (and is the probe's image: the same epwindow).
	Image string
	// HistorySize is the history volume's storage request.
	HistorySize resource.Quantity
	// StorageClass is the claim's class; "" is the cluster's default.
	StorageClass string
	// Args are measure's flags after the --namespace and --history the
	// schedule sets itself.
	Args   []string
	Labels map[string]string
	// DocumentedPreStop is the preStop the platform documents, exported by
	// the history's metrics server for the bound alert (0: not exported).
	DocumentedPreStop time.Duration
	// MetricsRefresh is how often the metrics server reads the history
	// again (0: history's default, a minute).
	MetricsRefresh time.Duration
	// BaselineTrials and WindowTrials size the metrics server's drift test
	// (history's --baseline-trials and --window-trials; 0: its defaults).
	BaselineTrials, WindowTrials int
}

// Schedule is the rendered in-cluster schedule, in apply order.
type Schedule struct {
	Namespace          *corev1.Namespace
	ServiceAccount     *corev1.ServiceAccount
	Role               *rbacv1.Role
	RoleBinding        *rbacv1.RoleBinding
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	Claim              *corev1.PersistentVolumeClaim
	HistoryServer      *appsv1.Deployment
	CronJob            *batchv1.CronJob
}

// Objects returns the schedule's objects in apply order.
func (s *Schedule) Objects() []any {
	return []any{s.Namespace, s.ServiceAccount, s.Role, s.RoleBinding, s.ClusterRole, s.ClusterRoleBinding, s.Claim, s.HistoryServer, s.CronJob}
}

// ValidateSchedule checks a CronJob schedule as the API server does on
// create: github.com/robfig/cron/v3 ParseStandard (five fields, or a
// descriptor such as @hourly or @every 6h), and no TZ= or CRON_TZ= in it
// (kubernetes pkg/apis/batch/validation/validation.go,
// validateScheduleFormat: "cannot use TZ or CRON_TZ in schedule, use
// timeZone field instead").
func ValidateSchedule(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("--schedule is empty: want a cron schedule such as \"0 */6 * * *\" or \"@every 6h\"")
	}
	if strings.Contains(s, "TZ") {
		return fmt.Errorf("--schedule %q: the API server refuses TZ or CRON_TZ in a CronJob's schedule", s)
	}
	if _, err := cron.ParseStandard(s); err != nil {
		return fmt.Errorf("--schedule %q: %w (want five fields, e.g. \"0 */6 * * *\", or @hourly, @daily, @every 6h)", s, err)
	}
	return nil
}

// LongestGap is the longest time between two consecutive runs of the cron
// schedule s in the year after from (nine years for a schedule that runs at
// most once a year, such as on February 29th): a weekday schedule's
// weekend, a monthly one's 31 days. The history's metrics server exports it
// for the alert on a schedule that stopped measuring. The times are UTC; a
// controller in a zone with daylight saving may stretch a gap by its hour.
func LongestGap(s string, from time.Time) (time.Duration, error) {
	sched, err := cron.ParseStandard(s)
	if err != nil {
		return 0, fmt.Errorf("--schedule %q: %w", s, err)
	}
	from = from.UTC()
	for _, years := range []int{1, 9} {
		end := from.AddDate(years, 0, 0)
		var longest time.Duration
		for prev := sched.Next(from); !prev.IsZero() && prev.Before(end); {
			next := sched.Next(prev)
			if next.IsZero() {
				break
			}
			longest = max(longest, next.Sub(prev))
			prev = next
		}
		if longest > 0 {
			return longest, nil
		}
	}
	return 0, fmt.Errorf("--schedule %q: no two runs within nine years", s)
}

// Validate checks the parameters; messages name the flag to change.
func (p ScheduleParams) Validate() error {
	if errs := validation.IsDNS1123Label(p.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q (--namespace): %s", p.Namespace, strings.Join(errs, "; "))
	}
	if err := ValidateSchedule(p.Schedule); err != nil {
		return err
	}
	if strings.TrimSpace(p.Image) == "" || strings.ContainsAny(p.Image, " \t\n") {
		return fmt.Errorf("--image %q: must name an image, e.g. registry.example.com/epwindow:v1", p.Image)
	}
	if p.HistorySize.Sign() <= 0 {
		return fmt.Errorf("--history-size (%s) must be above 0", p.HistorySize.String())
	}
	if p.DocumentedPreStop < 0 {
		return fmt.Errorf("--documented-prestop (%s) must not be negative", p.DocumentedPreStop)
	}
	if p.MetricsRefresh < 0 {
		return fmt.Errorf("--metrics-refresh (%s) must not be negative", p.MetricsRefresh)
	}
	if p.BaselineTrials < 0 || p.WindowTrials < 0 {
		return fmt.Errorf("--baseline-trials (%d) and --window-trials (%d) must not be negative", p.BaselineTrials, p.WindowTrials)
	}
	if p.StorageClass != "" {
		if errs := validation.IsDNS1123Subdomain(p.StorageClass); len(errs) > 0 {
			return fmt.Errorf("--storage-class %q: %s", p.StorageClass, strings.Join(errs, "; "))
		}
	}
	return validateLabels(p.Labels)
}

// RenderSchedule builds deploy/schedule from the embedded manifests and
// sets p's values on its objects.
func RenderSchedule(p ScheduleParams) (*Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	m, err := kustomize(ScheduleDir)
	if err != nil {
		return nil, err
	}
	s := &Schedule{
		Namespace: &corev1.Namespace{}, ServiceAccount: &corev1.ServiceAccount{},
		Role: &rbacv1.Role{}, RoleBinding: &rbacv1.RoleBinding{},
		ClusterRole: &rbacv1.ClusterRole{}, ClusterRoleBinding: &rbacv1.ClusterRoleBinding{},
		Claim: &corev1.PersistentVolumeClaim{}, HistoryServer: &appsv1.Deployment{}, CronJob: &batchv1.CronJob{},
	}
	// Each kind once, into its typed object.
	targets := map[string]any{}
	for _, o := range s.Objects() {
		targets[reflect.TypeOf(o).Elem().Name()] = o
	}
	for _, r := range m.Resources() {
		kind := r.GetKind()
		target, ok := targets[kind]
		if !ok {
			return nil, fmt.Errorf("deploy/%s: unexpected %s %q (or a second one)", ScheduleDir, kind, r.GetName())
		}
		delete(targets, kind)
		data, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("deploy/%s: %s: %w", ScheduleDir, r.CurId(), err)
		}
		// Strict: a field the typed API does not know is a typo in the YAML.
		if err := yaml.UnmarshalStrict(data, target); err != nil {
			return nil, fmt.Errorf("deploy/%s: decode %s: %w", ScheduleDir, r.CurId(), err)
		}
	}
	if len(targets) > 0 {
		return nil, fmt.Errorf("deploy/%s: want a Namespace, a ServiceAccount, a Role, a ClusterRole, their bindings, a PersistentVolumeClaim, a Deployment and a CronJob; %d of them missing", ScheduleDir, len(targets))
	}
	if err := p.apply(s); err != nil {
		return nil, fmt.Errorf("deploy/%s: %w", ScheduleDir, err)
	}
	return s, nil
}

// apply sets p's values on the decoded objects.
func (p ScheduleParams) apply(s *Schedule) error {
	s.Namespace.Name = p.Namespace
	clusterName := scheduleRole + "-" + p.Namespace
	s.Role.Name, s.RoleBinding.Name = scheduleRole, scheduleRole
	s.ClusterRole.Name, s.ClusterRoleBinding.Name = clusterName, clusterName
	for _, m := range []*metav1.ObjectMeta{&s.Namespace.ObjectMeta, &s.ClusterRole.ObjectMeta, &s.ClusterRoleBinding.ObjectMeta} {
		p.label(m)
	}
	for _, m := range []*metav1.ObjectMeta{
		&s.ServiceAccount.ObjectMeta, &s.Role.ObjectMeta, &s.RoleBinding.ObjectMeta, &s.Claim.ObjectMeta,
		&s.HistoryServer.ObjectMeta, &s.HistoryServer.Spec.Template.ObjectMeta,
		&s.CronJob.ObjectMeta, &s.CronJob.Spec.JobTemplate.ObjectMeta, &s.CronJob.Spec.JobTemplate.Spec.Template.ObjectMeta,
	} {
		m.Namespace = p.Namespace
		p.label(m)
	}
	// The templates' metadata have no namespace of their own.
	s.CronJob.Spec.JobTemplate.Namespace, s.CronJob.Spec.JobTemplate.Spec.Template.Namespace = "", ""
	s.HistoryServer.Spec.Template.Namespace = ""
	if err := p.applyHistoryServer(s); err != nil {
		return err
	}

	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: s.ServiceAccount.Name, Namespace: p.Namespace}}
	s.RoleBinding.Subjects, s.ClusterRoleBinding.Subjects = subject, subject
	s.RoleBinding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: s.Role.Name}
	s.ClusterRoleBinding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: s.ClusterRole.Name}

	if s.Claim.Spec.Resources.Requests == nil {
		s.Claim.Spec.Resources.Requests = corev1.ResourceList{}
	}
	s.Claim.Spec.Resources.Requests[corev1.ResourceStorage] = p.HistorySize
	if p.StorageClass != "" {
		class := p.StorageClass
		s.Claim.Spec.StorageClassName = &class
	}

	cj := &s.CronJob.Spec
	cj.Schedule = p.Schedule
	pod := &cj.JobTemplate.Spec.Template.Spec
	pod.ServiceAccountName = s.ServiceAccount.Name
	if len(pod.Containers) != 1 {
		return fmt.Errorf("the CronJob's pod has %d containers, want 1", len(pod.Containers))
	}
	c := &pod.Containers[0]
	c.Image = p.Image
	mounted := false
	for _, vm := range c.VolumeMounts {
		mounted = mounted || vm.MountPath == HistoryMountPath
	}
	claimed := false
	for i := range pod.Volumes {
		if v := pod.Volumes[i].PersistentVolumeClaim; v != nil {
			v.ClaimName = s.Claim.Name
			claimed = true
		}
	}
	if !mounted || !claimed {
		return fmt.Errorf("the CronJob's container does not mount the history claim at %s", HistoryMountPath)
	}
	c.Command = append(c.Command[:len(c.Command):len(c.Command)], "--namespace="+p.Namespace, "--history="+HistoryMountPath)
	c.Command = append(c.Command, p.Args...)
	return nil
}

// applyHistoryServer sets the metrics server's image, claim and flags.
func (p ScheduleParams) applyHistoryServer(s *Schedule) error {
	pod := &s.HistoryServer.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.Volumes) != 1 || pod.Volumes[0].PersistentVolumeClaim == nil {
		return errors.New("the history server's pod wants one container and the history claim")
	}
	pod.Volumes[0].PersistentVolumeClaim.ClaimName = s.Claim.Name
	c := &pod.Containers[0]
	c.Image = p.Image
	c.Command = slices.Clip(c.Command)
	if p.DocumentedPreStop > 0 {
		c.Command = append(c.Command, "--documented-prestop="+p.DocumentedPreStop.String())
	}
	if p.MetricsRefresh > 0 {
		c.Command = append(c.Command, "--refresh="+p.MetricsRefresh.String())
	}
	if p.BaselineTrials > 0 {
		c.Command = append(c.Command, fmt.Sprintf("--baseline-trials=%d", p.BaselineTrials))
	}
	if p.WindowTrials > 0 {
		c.Command = append(c.Command, fmt.Sprintf("--window-trials=%d", p.WindowTrials))
	}
	// For the alert on a schedule that stopped: how long two runs may lie
	// apart.
	gap, err := LongestGap(p.Schedule, time.Now())
	if err != nil {
		return err
	}
	c.Command = append(c.Command, "--expect-run-every="+gap.String())
	c.Command = append(c.Command, HistoryMountPath)
	return nil
}

// label adds the schedule's labels to m.
func (p ScheduleParams) label(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	for k, v := range p.Labels {
		m.Labels[k] = v
	}
	m.Labels[LabelManagedBy] = ManagedByValue
}
