package deploy

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func testScheduleParams() ScheduleParams {
	return ScheduleParams{
		Namespace:    "team-a",
		Schedule:     "@every 6h",
		Image:        "registry.example.com/epwindow:v1",
		HistorySize:  resource.MustParse("2Gi"),
		StorageClass: "fast",
		Args:         []string{"--trials=10", "--keep-runs=200", "--url=http://ingress.example"},
		Labels:       map[string]string{"team": "platform"},
	}
}

func TestRenderSchedule(t *testing.T) {
	p := testScheduleParams()
	s := mustBuild(t, RenderSchedule, p)

	if s.Namespace.Name != "team-a" || s.Namespace.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("Namespace = %q, labels %v", s.Namespace.Name, s.Namespace.Labels)
	}
	for _, m := range []struct {
		kind, ns string
		labels   map[string]string
	}{
		{"ServiceAccount", s.ServiceAccount.Namespace, s.ServiceAccount.Labels},
		{"Role", s.Role.Namespace, s.Role.Labels},
		{"RoleBinding", s.RoleBinding.Namespace, s.RoleBinding.Labels},
		{"PersistentVolumeClaim", s.Claim.Namespace, s.Claim.Labels},
		{"CronJob", s.CronJob.Namespace, s.CronJob.Labels},
		{"CronJob pod", "team-a", s.CronJob.Spec.JobTemplate.Spec.Template.Labels},
	} {
		if m.ns != "team-a" {
			t.Errorf("%s in namespace %q", m.kind, m.ns)
		}
		if m.labels["team"] != "platform" || m.labels[LabelManagedBy] != ManagedByValue {
			t.Errorf("%s labels = %v", m.kind, m.labels)
		}
	}
	if s.CronJob.Spec.JobTemplate.Spec.Template.Namespace != "" {
		t.Error("the pod template has a namespace")
	}

	// Names of their own, the cluster-wide ones by namespace.
	if s.Role.Name != "epwindow-schedule" || s.RoleBinding.Name != "epwindow-schedule" ||
		s.ClusterRole.Name != "epwindow-schedule-team-a" || s.ClusterRoleBinding.Name != "epwindow-schedule-team-a" {
		t.Errorf("names: Role %q, RoleBinding %q, ClusterRole %q, ClusterRoleBinding %q",
			s.Role.Name, s.RoleBinding.Name, s.ClusterRole.Name, s.ClusterRoleBinding.Name)
	}
	sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: ScheduleName, Namespace: "team-a"}}
	if !reflect.DeepEqual(s.RoleBinding.Subjects, sa) || !reflect.DeepEqual(s.ClusterRoleBinding.Subjects, sa) {
		t.Errorf("subjects = %+v and %+v, want the ServiceAccount", s.RoleBinding.Subjects, s.ClusterRoleBinding.Subjects)
	}
	if r := s.RoleBinding.RoleRef; r.Kind != "Role" || r.Name != s.Role.Name || r.APIGroup != rbacv1.GroupName {
		t.Errorf("RoleBinding.roleRef = %+v", r)
	}
	if r := s.ClusterRoleBinding.RoleRef; r.Kind != "ClusterRole" || r.Name != s.ClusterRole.Name {
		t.Errorf("ClusterRoleBinding.roleRef = %+v", r)
	}

	if got := s.Claim.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("claim requests %s, want 2Gi", got.String())
	}
	if c := s.Claim.Spec.StorageClassName; c == nil || *c != "fast" {
		t.Errorf("storageClassName = %v", c)
	}

	cj := s.CronJob.Spec
	if cj.Schedule != "@every 6h" || cj.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("schedule %q, concurrencyPolicy %q; want @every 6h, Forbid", cj.Schedule, cj.ConcurrencyPolicy)
	}
	pod := cj.JobTemplate.Spec.Template.Spec
	if pod.ServiceAccountName != s.ServiceAccount.Name || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod serviceAccountName %q, restartPolicy %q", pod.ServiceAccountName, pod.RestartPolicy)
	}
	c := pod.Containers[0]
	want := []string{"epwindow", "measure", "--namespace=team-a", "--history=" + HistoryMountPath, "--trials=10", "--keep-runs=200", "--url=http://ingress.example"}
	if c.Image != p.Image || !reflect.DeepEqual(c.Command, want) {
		t.Errorf("container %q %q, want %q %q", c.Image, c.Command, p.Image, want)
	}
	var claim string
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if claim != s.Claim.Name || claim != HistoryClaim {
		t.Errorf("the pod mounts claim %q, want %q", claim, s.Claim.Name)
	}

	// Rendering twice from the same embedded files: no shared state.
	again := mustBuild(t, RenderSchedule, ScheduleParams{Namespace: "other", Schedule: "@hourly", Image: "x", HistorySize: DefaultHistorySize})
	if again.CronJob.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Command[2] != "--namespace=other" {
		t.Errorf("second render: %q", again.CronJob.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Command)
	}
	if again.Claim.Spec.StorageClassName != nil {
		t.Error("no --storage-class still sets one")
	}
}

// TestScheduleRBAC: the schedule grants measure what it checks in its own
// namespace, through the namespaced variant's rules, and nothing that
// writes outside it.
// The history's metrics server: the pod deploy/monitoring's PodMonitor
// selects, serving the history volume read-only with the documented preStop
// for the bound alert; the runs are placed on its node, which holds the
// ReadWriteOnce claim.
func TestScheduleHistoryServer(t *testing.T) {
	p := testScheduleParams()
	p.DocumentedPreStop, p.MetricsRefresh = 5*time.Second, 30*time.Second
	s := mustBuild(t, RenderSchedule, p)
	h := s.HistoryServer
	pod := h.Spec.Template.Spec
	if h.Namespace != "team-a" || h.Name != HistoryServerName || h.Spec.Template.Labels["app.kubernetes.io/name"] != HistoryServerName ||
		h.Spec.Template.Labels["team"] != "platform" || h.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("history server %s/%s, pod labels %v, strategy %s", h.Namespace, h.Name, h.Spec.Template.Labels, h.Spec.Strategy.Type)
	}
	c := pod.Containers[0]
	want := []string{"epwindow", "history", "--serve=:9090", "--documented-prestop=5s", "--refresh=30s", "--expect-run-every=6h0m0s", HistoryMountPath}
	if !reflect.DeepEqual(c.Command, want) || c.Image != p.Image {
		t.Errorf("history server runs %q from %s, want %q from %s", c.Command, c.Image, want, p.Image)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || len(c.VolumeMounts) != 1 || !c.VolumeMounts[0].ReadOnly ||
		pod.Volumes[0].PersistentVolumeClaim.ClaimName != s.Claim.Name || !pod.Volumes[0].PersistentVolumeClaim.ReadOnly {
		t.Errorf("history server ports %+v mounts %+v volumes %+v: want port metrics and the claim read-only", c.Ports, c.VolumeMounts, pod.Volumes)
	}
	aff := s.CronJob.Spec.JobTemplate.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAffinity == nil || len(aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != corev1.LabelHostname ||
		aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels["app.kubernetes.io/name"] != HistoryServerName {
		t.Errorf("the runs' affinity %+v: want them on the history server's node", aff)
	}
	p.DocumentedPreStop = 0
	if s := mustBuild(t, RenderSchedule, p); slices.ContainsFunc(s.HistoryServer.Spec.Template.Spec.Containers[0].Command, func(a string) bool { return strings.HasPrefix(a, "--documented-prestop") }) {
		t.Error("--documented-prestop passed with none given")
	}
	p.DocumentedPreStop = -time.Second
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "--documented-prestop") {
		t.Errorf("a negative documented preStop: %v, want an error naming the flag", err)
	}
}

func TestScheduleRBAC(t *testing.T) {
	s := mustBuild(t, RenderSchedule, testScheduleParams())
	both := append(PermissionsFor(false, RouteIngress, GatewayRef{}),
		PermissionsFor(false, RouteHTTPRoute, GatewayRef{Namespace: "gw", Name: "traefik"})...)
	rules := func(rs []rbacv1.PolicyRule) map[rule]bool {
		out := map[rule]bool{}
		for _, r := range rs {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out[rule{g, res, v}] = true
					}
				}
			}
		}
		return out
	}
	if got, want := rules(s.Role.Rules), permRules(both, ScopeRun); !reflect.DeepEqual(got, want) {
		t.Errorf("Role grants %v, measure --namespace needs %v", got, want)
	}
	if got, want := rules(s.ClusterRole.Rules), permRules(both, ScopeCluster, ScopeFixed); !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole grants %v, measure needs %v", got, want)
	}
	for r := range rules(s.ClusterRole.Rules) {
		read := r.verb == "get" || r.verb == "list" || r.verb == "watch"
		// A SelfSubjectAccessReview is a question, stored nowhere.
		if !read && r.resource != "selfsubjectaccessreviews" {
			t.Errorf("the ClusterRole grants %s: a cluster-wide write", fmtRule(r))
		}
	}
}

func TestValidateSchedule(t *testing.T) {
	for _, s := range []string{"@every 6h", "@every 90m", "@hourly", "@daily", "@weekly", "0 */6 * * *", "*/15 * * * 1-5", "30 2 * * SUN"} {
		if err := ValidateSchedule(s); err != nil {
			t.Errorf("ValidateSchedule(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "  ", "every 6h", "@every", "@every 6x", "@fortnightly", "61 * * * *", "* * * *", "* * * * * *",
		"TZ=UTC 0 * * * *", "CRON_TZ=Europe/Berlin 0 6 * * *"} {
		err := ValidateSchedule(s)
		if err == nil || !strings.Contains(err.Error(), "--schedule") {
			t.Errorf("ValidateSchedule(%q) = %v, want an error naming --schedule", s, err)
		}
	}
}

func TestScheduleParamsValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*ScheduleParams)
		want string
	}{
		{"namespace", func(p *ScheduleParams) { p.Namespace = "Team_A" }, "--namespace"},
		{"schedule", func(p *ScheduleParams) { p.Schedule = "hourly" }, "--schedule"},
		{"image", func(p *ScheduleParams) { p.Image = "" }, "--image"},
		{"size zero", func(p *ScheduleParams) { p.HistorySize = resource.Quantity{} }, "--history-size"},
		{"size negative", func(p *ScheduleParams) { p.HistorySize = resource.MustParse("-1Gi") }, "--history-size"},
		{"storage class", func(p *ScheduleParams) { p.StorageClass = "Fast SSD" }, "--storage-class"},
		{"label", func(p *ScheduleParams) { p.Labels = map[string]string{LabelManagedBy: "me"} }, "--label"},
	}
	if err := testScheduleParams().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testScheduleParams()
			tt.mod(&p)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// TestWriteYAMLSchedule: the printed schedule is a YAML stream kubectl
// applies — every document has its apiVersion and kind, decodes strictly
// into its typed API object, and equals what was rendered — without the
// server-filled noise of a typed object.
func TestWriteYAMLSchedule(t *testing.T) {
	s := mustBuild(t, RenderSchedule, testScheduleParams())
	out, docs := yamlDocs(t, s)
	got := &Schedule{
		Namespace: &corev1.Namespace{}, ServiceAccount: &corev1.ServiceAccount{}, Role: &rbacv1.Role{}, RoleBinding: &rbacv1.RoleBinding{},
		ClusterRole: &rbacv1.ClusterRole{}, ClusterRoleBinding: &rbacv1.ClusterRoleBinding{}, Claim: &corev1.PersistentVolumeClaim{},
		HistoryServer: &appsv1.Deployment{}, CronJob: &batchv1.CronJob{},
	}
	if len(docs) != len(got.Objects()) {
		t.Fatalf("got %d documents, want %d:\n%s", len(docs), len(got.Objects()), out)
	}
	kinds := []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "PersistentVolumeClaim", "Deployment", "CronJob"}
	for i, obj := range got.Objects() {
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(docs[i]), &tm); err != nil || tm.APIVersion == "" || tm.Kind != kinds[i] {
			t.Errorf("document %d: apiVersion %q kind %q (%v), want kind %s", i, tm.APIVersion, tm.Kind, err, kinds[i])
		}
		if err := yaml.UnmarshalStrict([]byte(docs[i]), obj); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if want := s.Objects()[i]; !apiequality.Semantic.DeepEqual(obj, want) {
			t.Errorf("document %d decodes to %+v, want %+v", i, obj, want)
		}
	}
	if !strings.Contains(out, "concurrencyPolicy: Forbid") || !strings.Contains(out, "schedule: '@every 6h'") {
		t.Errorf("the CronJob's schedule or concurrencyPolicy is not as set:\n%s", out)
	}
}

// TestKustomizeScheduleOnDisk: `kubectl apply -k deploy/schedule` (a GitOps
// user's way) gives the objects manifests --schedule prints for namespace
// epwindow the same names, and its bindings bind the ServiceAccount to the
// schedule's own roles.
func TestKustomizeScheduleOnDisk(t *testing.T) {
	m, err := kustomize(ScheduleDir)
	if err != nil {
		t.Fatal(err)
	}
	p := testScheduleParams()
	p.Namespace = "epwindow"
	s := mustBuild(t, RenderSchedule, p)
	want := map[string]string{}
	for _, o := range s.Objects() {
		meta := reflect.ValueOf(o).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
		want[reflect.TypeOf(o).Elem().Name()] = meta.Namespace + "/" + meta.Name
	}
	for _, r := range m.Resources() {
		if got := r.GetNamespace() + "/" + r.GetName(); got != want[r.GetKind()] {
			t.Errorf("kustomize build deploy/schedule: %s %s, manifests --schedule prints %s", r.GetKind(), got, want[r.GetKind()])
		}
		if r.GetKind() != "RoleBinding" && r.GetKind() != "ClusterRoleBinding" {
			continue
		}
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var b rbacv1.RoleBinding // a ClusterRoleBinding has the same roleRef and subjects
		if err := yaml.Unmarshal(data, &b); err != nil {
			t.Fatal(err)
		}
		wantRef := s.RoleBinding.RoleRef
		if r.GetKind() == "ClusterRoleBinding" {
			wantRef = s.ClusterRoleBinding.RoleRef
		}
		if b.RoleRef != wantRef || !reflect.DeepEqual(b.Subjects, s.RoleBinding.Subjects) {
			t.Errorf("%s binds %+v to %+v, want %+v to %+v", r.GetKind(), b.Subjects, b.RoleRef, s.RoleBinding.Subjects, wantRef)
		}
	}
}

// The longest gap between two runs, for the alert on a schedule that
// stopped: every descriptor and field form the API server takes.
func TestLongestGap(t *testing.T) {
	from := time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC) // a Monday
	tests := []struct {
		schedule string
		want     time.Duration
	}{
		{"* * * * *", time.Minute},
		{"@every 6h", 6 * time.Hour},
		{"@every 90m", 90 * time.Minute},
		{"0 */6 * * *", 6 * time.Hour},
		{"@hourly", time.Hour},
		{"@daily", 24 * time.Hour},
		{"@weekly", 7 * 24 * time.Hour},
		{"0 9 * * 1-5", 3 * 24 * time.Hour},               // Friday 09:00 to Monday 09:00
		{"0 0 1 * *", 31 * 24 * time.Hour},                // the longest month
		{"*/15 8-17 * * 1-5", (62*60 + 15) * time.Minute}, // Friday 17:45 to Monday 08:00
		{"0 0 29 2 *", (4*365 + 1) * 24 * time.Hour},      // leap days, four years apart
	}
	for _, tt := range tests {
		got, err := LongestGap(tt.schedule, from)
		if err != nil || got != tt.want {
			t.Errorf("LongestGap(%q) = %v, %v; want %v", tt.schedule, got, err, tt.want)
		}
	}
	if _, err := LongestGap("61 * * * *", from); err == nil || !strings.Contains(err.Error(), "--schedule") {
		t.Errorf("a bad schedule: %v, want an error naming --schedule", err)
	}
}
