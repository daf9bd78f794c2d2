package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/kubernetes/pkg/kubelet/envvars"
)

// podVolume is one of a pod's volumes as it lies on this machine.
type podVolume struct {
	path     string // the host directory the container mounts
	readOnly bool   // mounted read-only whatever the volumeMount says
}

// projectedToken is a serviceAccountToken file the agent keeps fresh. It
// holds its own copy of the pod's identity: it is refreshed on a goroutine
// of its own while the worker replaces its pod object.
type projectedToken struct {
	ns, sa, pod string
	uid         types.UID
	file        string
	src         v1.ServiceAccountTokenProjection
	mode        os.FileMode
	refreshAt   time.Time // when to ask for a new one
}

// defaultFileMode is a projected, configMap or secret file's mode when
// the volume names none (the API's default, 0644).
const defaultFileMode = 0o644

// prepareVolumes lays out every volume of the pod once, before its first
// container starts, as the kubelet's volume manager does before it starts
// any: emptyDir, configMap, secret, downwardAPI and projected volumes
// (the ServiceAccount admission plugin's kube-api-access-* among them: a
// bound token, the cluster CA, the namespace) under the pod's directory,
// and persistentVolumeClaim and hostPath volumes where they lie on this
// machine. A claim that is not bound yet fails here, and the start is
// retried, as the kubelet waits for it.
func (w *podWorker) prepareVolumes(ctx context.Context) error {
	if w.vols != nil {
		return nil
	}
	vols := map[string]podVolume{}
	var tokens []*projectedToken
	for _, v := range w.pod.Spec.Volumes {
		pv, toks, err := w.volume(ctx, v)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		vols[v.Name] = pv
		tokens = append(tokens, toks...)
	}
	w.vols = vols
	if len(tokens) > 0 {
		go w.refreshTokens(ctx, tokens)
	}
	return nil
}

func (w *podWorker) volume(ctx context.Context, v v1.Volume) (podVolume, []*projectedToken, error) {
	dir := filepath.Join(w.dir, "volumes", v.Name)
	src := v.VolumeSource
	switch {
	case src.EmptyDir != nil:
		// The kubelet makes an emptyDir world-writable
		// (pkg/volume/emptydir/empty_dir.go, setupDir: 0777). Medium
		// Memory is backed by the pod's directory here, not a tmpfs, and
		// sizeLimit is not enforced (the kubelet enforces it by eviction).
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return podVolume{}, nil, err
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			return podVolume{}, nil, err
		}
		return podVolume{path: dir}, nil, w.ownByFSGroup(dir)
	case src.PersistentVolumeClaim != nil:
		p, err := w.claimPath(ctx, src.PersistentVolumeClaim.ClaimName)
		return podVolume{path: p, readOnly: src.PersistentVolumeClaim.ReadOnly}, nil, err
	case src.HostPath != nil:
		p := src.HostPath.Path
		if t := src.HostPath.Type; t != nil && *t == v1.HostPathDirectoryOrCreate {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return podVolume{}, nil, err
			}
		}
		if _, err := os.Stat(p); err != nil {
			return podVolume{}, nil, fmt.Errorf("hostPath: %w", err)
		}
		return podVolume{path: p}, nil, nil
	}
	var projections []v1.VolumeProjection
	var mode *int32
	switch {
	case src.Projected != nil:
		projections, mode = src.Projected.Sources, src.Projected.DefaultMode
	case src.ConfigMap != nil:
		projections, mode = []v1.VolumeProjection{{ConfigMap: &v1.ConfigMapProjection{
			LocalObjectReference: src.ConfigMap.LocalObjectReference, Items: src.ConfigMap.Items, Optional: src.ConfigMap.Optional,
		}}}, src.ConfigMap.DefaultMode
	case src.Secret != nil:
		projections, mode = []v1.VolumeProjection{{Secret: &v1.SecretProjection{
			LocalObjectReference: v1.LocalObjectReference{Name: src.Secret.SecretName}, Items: src.Secret.Items, Optional: src.Secret.Optional,
		}}}, src.Secret.DefaultMode
	case src.DownwardAPI != nil:
		projections, mode = []v1.VolumeProjection{{DownwardAPI: &v1.DownwardAPIProjection{Items: src.DownwardAPI.Items}}}, src.DownwardAPI.DefaultMode
	default:
		return podVolume{}, nil, errors.New("unsupported volume type: the node agent mounts emptyDir, configMap, secret, downwardAPI, projected, persistentVolumeClaim and hostPath volumes")
	}
	defMode := os.FileMode(defaultFileMode)
	if mode != nil {
		defMode = os.FileMode(*mode)
	}
	toks, err := w.project(ctx, dir, projections, defMode)
	return podVolume{path: dir, readOnly: true}, toks, err
}

// claimPath is where a bound claim's PersistentVolume lies on this machine:
// hostPath and local volumes only (the node has no other storage).
func (w *podWorker) claimPath(ctx context.Context, name string) (string, error) {
	pvc, err := w.a.client.CoreV1().PersistentVolumeClaims(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentVolumeClaim %s: %w", name, err)
	}
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("persistentVolumeClaim %s is not bound yet (phase %s)", name, pvc.Status.Phase)
	}
	pv, err := w.a.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentVolume %s of claim %s: %w", pvc.Spec.VolumeName, name, err)
	}
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path, nil
	case pv.Spec.Local != nil:
		if err := w.ownByFSGroup(pv.Spec.Local.Path); err != nil {
			return "", err
		}
		return pv.Spec.Local.Path, nil
	}
	return "", fmt.Errorf("persistentVolume %s: only hostPath and local volumes can be mounted here", pv.Name)
}

// ownByFSGroup gives dir to the pod's fsGroup, group-writable with the
// setgid bit, as the kubelet does for the volume types whose ownership it
// manages (pkg/volume/volume_linux.go, SetVolumeOwnership; the top
// directory only: the agent's volumes start empty).
func (w *podWorker) ownByFSGroup(dir string) error {
	sc := w.pod.Spec.SecurityContext
	if sc == nil || sc.FSGroup == nil {
		return nil
	}
	if err := os.Lchown(dir, -1, int(*sc.FSGroup)); err != nil {
		return fmt.Errorf("fsGroup %d on %s: %w", *sc.FSGroup, dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	return os.Chmod(dir, st.Mode().Perm()|0o070|os.ModeSetgid)
}

// volumeFile is one file of a projected volume.
type volumeFile struct {
	data []byte
	mode os.FileMode
}

// project writes a projected volume's files into dir (the kubelet's
// pkg/volume/projected): configMap and secret keys, downwardAPI fields and
// ServiceAccount tokens requested for this pod (TokenRequest, bound to the
// pod, as the kubelet's token manager asks for them). It returns the tokens
// to keep fresh.
func (w *podWorker) project(ctx context.Context, dir string, sources []v1.VolumeProjection, defMode os.FileMode) ([]*projectedToken, error) {
	files := map[string]volumeFile{}
	var tokens []*projectedToken
	itemMode := func(m *int32) os.FileMode {
		if m != nil {
			return os.FileMode(*m)
		}
		return defMode
	}
	keys := func(data map[string][]byte, items []v1.KeyToPath, what string) error {
		if len(items) == 0 {
			for k, v := range data {
				files[k] = volumeFile{v, defMode}
			}
			return nil
		}
		for _, it := range items {
			v, ok := data[it.Key]
			if !ok {
				return fmt.Errorf("%s has no key %q", what, it.Key)
			}
			files[it.Path] = volumeFile{v, itemMode(it.Mode)}
		}
		return nil
	}
	for _, s := range sources {
		switch {
		case s.ConfigMap != nil:
			cm, err := w.a.client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, s.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && optional(s.ConfigMap.Optional, err) == nil {
					continue
				}
				return nil, fmt.Errorf("configmap %s: %w", s.ConfigMap.Name, err)
			}
			data := map[string][]byte{}
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			for k, v := range cm.BinaryData {
				data[k] = v
			}
			if err := keys(data, s.ConfigMap.Items, "configmap "+cm.Name); err != nil {
				return nil, err
			}
		case s.Secret != nil:
			sec, err := w.a.client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, s.Secret.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && optional(s.Secret.Optional, err) == nil {
					continue
				}
				return nil, fmt.Errorf("secret %s: %w", s.Secret.Name, err)
			}
			if err := keys(sec.Data, s.Secret.Items, "secret "+sec.Name); err != nil {
				return nil, err
			}
		case s.DownwardAPI != nil:
			info := podRuntimeInfo{PodIP: w.podIP, HostIP: w.a.hostIP}
			for _, it := range s.DownwardAPI.Items {
				var v string
				switch {
				case it.FieldRef != nil:
					var err error
					if v, err = podFieldValue(w.pod, it.FieldRef.FieldPath, info); err != nil {
						return nil, err
					}
				case it.ResourceFieldRef != nil:
					c := w.containerNamed(it.ResourceFieldRef.ContainerName)
					if c == nil {
						return nil, fmt.Errorf("downwardAPI %s: no container %q", it.Path, it.ResourceFieldRef.ContainerName)
					}
					v = resourceFieldValue(c, it.ResourceFieldRef)
				}
				files[it.Path] = volumeFile{[]byte(v), itemMode(it.Mode)}
			}
		case s.ServiceAccountToken != nil:
			sa := w.pod.Spec.ServiceAccountName
			if sa == "" {
				sa = "default"
			}
			t := &projectedToken{
				ns: w.pod.Namespace, sa: sa, pod: w.pod.Name, uid: w.pod.UID,
				file: filepath.Join(dir, s.ServiceAccountToken.Path), src: *s.ServiceAccountToken, mode: defMode,
			}
			tok, err := w.requestToken(ctx, t)
			if err != nil {
				return nil, err
			}
			files[s.ServiceAccountToken.Path] = volumeFile{tok, defMode}
			tokens = append(tokens, t)
		case s.ClusterTrustBundle != nil, s.PodCertificate != nil:
			return nil, errors.New("clusterTrustBundle and podCertificate projections are not supported here")
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := writeVolumeFile(dir, name, files[name]); err != nil {
			return nil, err
		}
	}
	return tokens, w.ownByFSGroup(dir)
}

// writeVolumeFile writes name (a relative path the API server validated:
// no "..", not absolute) under dir, atomically: a reader sees the old file
// or the new one, never half of either.
func writeVolumeFile(dir, name string, f volumeFile) error {
	p := filepath.Join(dir, name)
	if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
		return fmt.Errorf("volume file %q leaves its volume", name)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(f.data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), f.mode.Perm())); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), p)
}

func (w *podWorker) containerNamed(name string) *v1.Container {
	for i := range w.pod.Spec.Containers {
		if c := &w.pod.Spec.Containers[i]; c.Name == name || name == "" && i == 0 {
			return c
		}
	}
	return nil
}

// requestToken asks for a token of the pod's ServiceAccount bound to the
// pod and sets when to ask again: at 80% of its life, as the kubelet's
// token manager does (pkg/kubelet/token/token_manager.go, requiresRefresh).
func (w *podWorker) requestToken(ctx context.Context, t *projectedToken) ([]byte, error) {
	exp := int64(3600)
	if t.src.ExpirationSeconds != nil {
		exp = *t.src.ExpirationSeconds
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: t.pod, UID: t.uid},
	}}
	if t.src.Audience != "" {
		req.Spec.Audiences = []string{t.src.Audience}
	}
	now := w.a.clock.Now()
	tr, err := w.a.client.CoreV1().ServiceAccounts(t.ns).CreateToken(ctx, t.sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token of serviceaccount %s: %w", t.sa, err)
	}
	life := tr.Status.ExpirationTimestamp.Sub(now)
	if life <= 0 {
		life = time.Duration(exp) * time.Second
	}
	t.refreshAt = now.Add(life * 8 / 10)
	return []byte(tr.Status.Token), nil
}

// refreshTokens rewrites each token file at 80% of its token's life until
// the pod's worker stops. A failed request is retried a minute later; the
// file keeps the old token meanwhile.
func (w *podWorker) refreshTokens(ctx context.Context, tokens []*projectedToken) {
	for {
		next := tokens[0].refreshAt
		for _, t := range tokens[1:] {
			if t.refreshAt.Before(next) {
				next = t.refreshAt
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.quit:
			return
		case <-w.a.clock.After(next.Sub(w.a.clock.Now())):
		}
		for _, t := range tokens {
			if w.a.clock.Now().Before(t.refreshAt) {
				continue
			}
			tok, err := w.requestToken(ctx, t)
			if err == nil {
				err = writeVolumeFile(filepath.Dir(t.file), filepath.Base(t.file), volumeFile{tok, t.mode})
			}
			if err != nil {
				w.log.Error("refresh projected token", "file", t.file, "err", err)
				t.refreshAt = w.a.clock.Now().Add(time.Minute)
			}
		}
	}
}

// containerMounts are the container's volumeMounts as the shim makes
// them. configMap, secret, downwardAPI and projected volumes are always
// read-only, as the kubelet mounts them.
func (w *podWorker) containerMounts(c *v1.Container) ([]shimMount, error) {
	var out []shimMount
	for _, m := range c.VolumeMounts {
		v, ok := w.vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %s mounts %q, which is not a volume of the pod", c.Name, m.Name)
		}
		if m.SubPathExpr != "" {
			return nil, fmt.Errorf("container %s: subPathExpr is not supported here", c.Name)
		}
		src := v.path
		if m.SubPath != "" {
			src = filepath.Join(v.path, m.SubPath)
			if !strings.HasPrefix(src, filepath.Clean(v.path)+string(filepath.Separator)) {
				return nil, fmt.Errorf("container %s: subPath %q leaves volume %s", c.Name, m.SubPath, m.Name)
			}
			if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(src, 0o755); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, shimMount{Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly || v.readOnly})
	}
	return out, nil
}

// serviceEnv is what the kubelet puts first in every container's
// environment whatever enableServiceLinks says: the default/kubernetes
// Service's variables (KUBERNETES_SERVICE_HOST, _PORT and the docker-link
// forms; pkg/kubelet/kubelet_pods.go, getServiceEnvVarMap, built by
// pkg/kubelet/envvars). client-go's in-cluster config reads them. The
// other Services' links (enableServiceLinks) are not injected here. It is
// read once per pod, at its first container start, and kept: exec probes
// and hooks reuse it rather than asking the API server at every period.
func (w *podWorker) serviceEnv(ctx context.Context) ([]v1.EnvVar, error) {
	if w.svcEnvRead {
		return w.svcEnv, nil
	}
	svc, err := w.a.client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("the kubernetes Service, for KUBERNETES_SERVICE_HOST: %w", err)
	case v1helper.IsServiceIPSet(svc):
		w.svcEnv = envvars.FromServices([]*v1.Service{svc})
	}
	w.svcEnvRead = true
	return w.svcEnv, nil
}
