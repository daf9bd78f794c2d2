package lint

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// targetGroupBindings are the AWS Load Balancer Controller's bindings; the
// CRD may be absent.
var targetGroupBindings = schema.GroupVersionResource{Group: "elbv2.k8s.aws", Version: "v1beta1", Resource: "targetgroupbindings"}

// ListLive reads the objects lint checks from a cluster: the workload
// kinds, Services, Ingresses, TargetGroupBindings (when dyn is not nil and
// the CRD exists) and Namespaces, in namespace ns ("" for all). Objects a
// workload controller owns (a Deployment's ReplicaSets, their pods, a
// CronJob's Jobs) are left out: their owner is checked. Notes says what
// could not be read without failing the lint (a namespace it may not get).
func ListLive(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, ns string) (objs []*Object, notes []string, err error) {
	lists := []struct {
		apiVersion, kind string
		list             func() (runtime.Object, error)
	}{
		{"apps/v1", "Deployment", func() (runtime.Object, error) { return cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}) }},
		{"apps/v1", "StatefulSet", func() (runtime.Object, error) { return cs.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{}) }},
		{"apps/v1", "DaemonSet", func() (runtime.Object, error) { return cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}) }},
		{"apps/v1", "ReplicaSet", func() (runtime.Object, error) { return cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{}) }},
		{"batch/v1", "Job", func() (runtime.Object, error) { return cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{}) }},
		{"batch/v1", "CronJob", func() (runtime.Object, error) { return cs.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{}) }},
		{"v1", "Pod", func() (runtime.Object, error) { return cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}) }},
		{"v1", "Service", func() (runtime.Object, error) { return cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}) }},
		{"networking.k8s.io/v1", "Ingress", func() (runtime.Object, error) {
			return cs.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{})
		}},
	}
	for _, l := range lists {
		list, err := l.list()
		if err != nil {
			return nil, nil, fmt.Errorf("list %ss%s: %w", l.kind, inNamespace(ns), err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, nil, err
		}
		for _, it := range items {
			o, err := LiveObject(l.apiVersion, l.kind, it)
			if err != nil {
				return nil, nil, err
			}
			if !controlled(o) {
				objs = append(objs, o)
			}
		}
	}
	if dyn != nil {
		tgbs, err := dyn.Resource(targetGroupBindings).Namespace(ns).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// No AWS Load Balancer Controller CRD: nothing to check.
		case err != nil:
			notes = append(notes, fmt.Sprintf("TargetGroupBindings not checked: %v", err))
		default:
			for _, it := range tgbs.Items {
				o, err := LiveObject(it.GetAPIVersion(), "TargetGroupBinding", it.Object)
				if err != nil {
					return nil, nil, err
				}
				objs = append(objs, o)
			}
		}
	}
	var nsObjs []runtime.Object
	if ns == "" {
		l, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			notes = append(notes, fmt.Sprintf("namespaces not read, %s not checked: %v", RuleReadinessGate, err))
		} else {
			for i := range l.Items {
				nsObjs = append(nsObjs, &l.Items[i])
			}
		}
	} else {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			notes = append(notes, fmt.Sprintf("namespace %s not read, %s not checked: %v", ns, RuleReadinessGate, err))
		} else {
			nsObjs = append(nsObjs, n)
		}
	}
	for _, n := range nsObjs {
		o, err := LiveObject("v1", "Namespace", n)
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, o)
	}
	return objs, notes, nil
}

func inNamespace(ns string) string {
	if ns == "" {
		return " in all namespaces"
	}
	return " in " + ns
}

// controlled reports whether a workload controller lint also checks owns
// o: then o's pod template is its owner's.
func controlled(o *Object) bool {
	md, _ := o.Raw["metadata"].(map[string]any)
	refs, _ := md["ownerReferences"].([]any)
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		if c, _ := ref["controller"].(bool); !c {
			continue
		}
		if _, ok := templatePaths[fmt.Sprint(ref["kind"])]; ok {
			return true
		}
	}
	return false
}
