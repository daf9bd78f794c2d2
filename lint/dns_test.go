package lint

import (
	"fmt"
	"strings"
	"testing"
)

// TestHeadlessNotReady: EPW012 joins a Service to the workloads it selects
// and flags a headless one that publishes not-ready addresses, unless only
// peers (a StatefulSet's or a Job's pods) are behind it.
func TestHeadlessNotReady(t *testing.T) {
	workload := func(kind, apiVersion, ns, app string) string {
		spec := fmt.Sprintf("template:\n    metadata: {labels: {app: %s}}\n    spec: {containers: [{name: app, image: a}]}", app)
		if kind == "CronJob" {
			spec = "schedule: '@daily'\n  jobTemplate:\n    spec:\n      " + strings.ReplaceAll(spec, "\n", "\n      ")
		}
		return fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %s, namespace: %s}\nspec:\n  %s\n",
			apiVersion, kind, strings.ToLower(kind), ns, spec)
	}
	service := func(ns, extra string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: peers, namespace: %s}\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n%s", ns, extra)
	}
	const (
		headlessNotReady = "  clusterIP: None\n  publishNotReadyAddresses: true\n"
		headless         = "  clusterIP: None\n"
	)
	deployment := workload("Deployment", "apps/v1", "shop", "web")
	tests := []struct {
		name string
		docs []string
		want string // the workloads the finding names; "" for none
	}{
		{"deployment", []string{deployment, service("shop", headlessNotReady)}, "Deployment shop/deployment"},
		{"without publishNotReadyAddresses", []string{deployment, service("shop", headless)}, ""},
		{"not headless", []string{deployment, service("shop", "  publishNotReadyAddresses: true\n")}, ""},
		{"clusterIP set", []string{deployment, service("shop", "  clusterIP: 10.96.0.20\n  publishNotReadyAddresses: true\n")}, ""},
		{"clusterIPs None", []string{deployment, service("shop", "  clusterIPs: [None]\n  publishNotReadyAddresses: true\n")}, "Deployment shop/deployment"},
		{"selector does not match", []string{workload("Deployment", "apps/v1", "shop", "api"), service("shop", headlessNotReady)}, ""},
		{"statefulset only", []string{workload("StatefulSet", "apps/v1", "shop", "web"), service("shop", headlessNotReady)}, ""},
		{"indexed job peers", []string{workload("Job", "batch/v1", "shop", "web"), workload("CronJob", "batch/v1", "shop", "web"), service("shop", headlessNotReady)}, ""},
		{"another namespace", []string{deployment, service("other", headlessNotReady)}, ""},
		{"statefulset and deployment", []string{workload("StatefulSet", "apps/v1", "shop", "web"), deployment, service("shop", headlessNotReady)},
			"Deployment shop/deployment"},
		{"replicaset, daemonset and pod", []string{workload("ReplicaSet", "apps/v1", "shop", "web"), workload("DaemonSet", "apps/v1", "shop", "web"),
			"apiVersion: v1\nkind: Pod\nmetadata: {name: pod, namespace: shop, labels: {app: web}}\nspec: {containers: [{name: app, image: a}]}\n",
			service("shop", headlessNotReady)},
			"ReplicaSet shop/replicaset, DaemonSet shop/daemonset, Pod shop/pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := ParseYAML("in.yaml", strings.NewReader(strings.Join(tt.docs, "---\n")))
			if err != nil {
				t.Fatal(err)
			}
			findings, err := Check(objs, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			var got []Finding
			for _, f := range findings {
				if f.Rule == RuleHeadlessNotReady {
					got = append(got, f)
				}
			}
			if tt.want == "" {
				if len(got) != 0 {
					t.Errorf("want no %s finding, got %+v", RuleHeadlessNotReady, got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("want one %s finding, got %+v", RuleHeadlessNotReady, got)
			}
			f := got[0]
			if f.Object != "Service shop/peers" || f.Field != "spec.publishNotReadyAddresses" || f.Level != LevelWarning ||
				!strings.Contains(f.Message, " of "+tt.want+":") {
				t.Errorf("finding %s %s %s %q, want Service shop/peers at spec.publishNotReadyAddresses, naming %s",
					f.Object, f.Field, f.Level, f.Message, tt.want)
			}
		})
	}
}
