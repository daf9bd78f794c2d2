package testenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RunScript runs script under bash in pod "client" of ns on node (image
// bash:local: the machine's bash, as the node agent runs it), waits up to
// timeout for the pod to end and returns its phase and log. The pod is
// created again while the namespace's default ServiceAccount, which pod
// admission needs, is on its way. On a timeout the error carries the
// pod's status and what it logged so far.
func RunScript(ctx context.Context, cs kubernetes.Interface, ns, node, script string, timeout time.Duration) (corev1.PodPhase, string, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "c", Image: "bash:local", Command: []string{"bash", "-c", script},
		}}},
	}
	var last error
	if err := Poll(ctx, "create the client pod", 100*time.Millisecond, 20*time.Second, func() (bool, error) {
		_, last = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return last == nil, nil
	}); err != nil {
		return "", "", fmt.Errorf("%w: %v", err, last)
	}
	var got *corev1.Pod
	err := Poll(ctx, "client pod finished", 200*time.Millisecond, timeout, func() (bool, error) {
		var err error
		if got, err = cs.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{}); err != nil {
			return false, err
		}
		return got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed, nil
	})
	logs, lerr := cs.CoreV1().Pods(ns).GetLogs("client", &corev1.PodLogOptions{Container: "c"}).DoRaw(ctx)
	if err != nil {
		var status corev1.PodStatus
		if got != nil {
			status = got.Status
		}
		return "", string(logs), fmt.Errorf("%v\npod status: %+v\nlog (%v):\n%s", err, status, lerr, logs)
	}
	if lerr != nil {
		return "", "", fmt.Errorf("client pod log: %w", lerr)
	}
	return got.Status.Phase, string(logs), nil
}
