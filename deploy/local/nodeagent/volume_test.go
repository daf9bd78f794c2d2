package nodeagent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// TestVolumesAndInClusterConfig runs a pod the way the in-cluster schedule's
// pod is made: the ServiceAccount admission plugin's kube-api-access volume
// (a bound token, the cluster CA, the namespace) at
// /var/run/secrets/kubernetes.io/serviceaccount, a PersistentVolumeClaim on
// a hostPath PersistentVolume, an emptyDir at /tmp, a read-only root, and
// KUBERNETES_SERVICE_HOST/PORT from the kubernetes Service. Mount points
// missing on this machine are made in an overlay, never on the host; the
// token is requested again at 80% of its life.
func TestVolumesAndInClusterConfig(t *testing.T) {
	ctx := context.Background()

	// A host directory with a file, and a mount path under it that does
	// not exist: the container must see the file and the volume, the host
	// must not get the missing directories.
	hostDir, err := os.MkdirTemp("/var/lib", "epwt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	if err := os.Chmod(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "marker"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	pvDir := t.TempDir()
	if err := os.Chmod(pvDir, 0o777); err != nil {
		t.Fatal(err)
	}

	var issued atomic.Int32
	tokenReactor := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		req := a.(k8stesting.CreateActionImpl).GetObject().(*authenticationv1.TokenRequest)
		if req.Spec.BoundObjectRef == nil || req.Spec.BoundObjectRef.Kind != "Pod" || req.Spec.BoundObjectRef.Name != "vol-1" {
			t.Errorf("token request not bound to the pod: %+v", req.Spec.BoundObjectRef)
		}
		n := issued.Add(1)
		// A two-second life: the agent asks again after 1.6 s.
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{
			Token: "tok-" + string(rune('0'+n)), ExpirationTimestamp: metav1.NewTime(time.Now().Add(2 * time.Second)),
		}}, nil
	}
	client, cfg := startTestAgentWith(t, func(c *fake.Clientset) { c.PrependReactor("create", "serviceaccounts", tokenReactor) })
	for _, o := range []runtime.Object{
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"}, Spec: v1.ServiceSpec{
			ClusterIP: "10.96.0.1", Ports: []v1.ServicePort{{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}},
		}},
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "default"}, Data: map[string]string{"ca.crt": "CA PEM"}},
		&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-0"}, Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: pvDir}},
		}},
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "hist", Namespace: "default"},
			Spec:   v1.PersistentVolumeClaimSpec{VolumeName: "pv-0", Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
			Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}},
	} {
		if err := client.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}

	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	histPath := filepath.Join(hostDir, "sub", "history")
	pod := testPod("vol-1")
	pod.Spec.ServiceAccountName = "runner"
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(65532))}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "kube-api-access-x", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
			DefaultMode: ptr.To(int32(0o644)),
			Sources: []v1.VolumeProjection{
				{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To(int64(3607)), Path: "token"}},
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			},
		}}},
		{Name: "history", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "hist"}}},
		{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []v1.VolumeMount{
		{Name: "kube-api-access-x", MountPath: sa, ReadOnly: true},
		{Name: "history", MountPath: histPath},
		{Name: "tmp", MountPath: "/tmp"},
	}
	c.Env = append(c.Env,
		v1.EnvVar{Name: "TESTAPP_READ", Value: strings.Join([]string{sa + "/token", sa + "/ca.crt", sa + "/namespace", filepath.Join(hostDir, "marker")}, ",")},
		v1.EnvVar{Name: "TESTAPP_WRITE", Value: filepath.Join(histPath, "run.jsonl")},
	)
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, client, "vol-1", 30*time.Second, "Ready", func(p *v1.Pod, _ watch.EventType) bool { return podReady(p) })
	resp, err := http.Get("http://" + p.Status.PodIP + ":8080/report")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep appReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report %q: %v", b, err)
	}
	if rep.Env["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" || rep.Env["KUBERNETES_SERVICE_PORT"] != "443" {
		t.Errorf("KUBERNETES_SERVICE_HOST/PORT = %q/%q, want 10.96.0.1/443", rep.Env["KUBERNETES_SERVICE_HOST"], rep.Env["KUBERNETES_SERVICE_PORT"])
	}
	for path, want := range map[string]string{sa + "/token": "tok-1", sa + "/ca.crt": "CA PEM", sa + "/namespace": "default", filepath.Join(hostDir, "marker"): "host"} {
		if rep.Files[path] != want {
			t.Errorf("container reads %s = %q, want %q", path, rep.Files[path], want)
		}
	}
	if rep.WriteErr != "" || !rep.RootRO || rep.UID != 65532 {
		t.Errorf("write to the claim's volume: %q; read-only root %v, uid %d", rep.WriteErr, rep.RootRO, rep.UID)
	}
	if got, err := os.ReadFile(filepath.Join(pvDir, "run.jsonl")); err != nil || string(got) != "written" {
		t.Errorf("the file the container wrote is not in the PersistentVolume's directory: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "sub")); !os.IsNotExist(err) {
		t.Errorf("the mount path's missing directories were made on the host (%v)", err)
	}
	if _, err := os.Stat("/run/secrets/kubernetes.io"); err == nil {
		t.Errorf("/run/secrets/kubernetes.io exists on the host after the pod mounted its token there")
	}
	tokenFile := filepath.Join(podDir(cfg, p), "volumes", "kube-api-access-x", "token")
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := os.ReadFile(tokenFile)
		if string(got) != "tok-1" && strings.HasPrefix(string(got), "tok-") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("token file still %q 10 s after a 2 s token was issued", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, err := os.Stat(filepath.Join(podDir(cfg, p), "volumes", "tmp")); err != nil || st.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir %v (%v), want mode 0777", st, err)
	}
	del := deleteGracefully(t, client, "vol-1")
	del.wait(t, 20*time.Second, "deleted by the agent", func(_ *v1.Pod, ev watch.EventType) bool { return ev == watch.Deleted })
}
