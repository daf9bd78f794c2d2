package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The Gateway API objects `up --ingress traefik|all` installs, as a
// platform team installing Traefik with its Helm chart would: one
// GatewayClass for Traefik's controller and one Gateway listening on
// Traefik's web entry point, open to routes from every namespace.
const (
	// GatewayAPIDir is where `make cluster` puts the standard-channel CRDs
	// of the sigs.k8s.io/gateway-api version deploy/local/traefik-build's
	// go.mod names (the one Traefik is built against), under --bin-dir.
	GatewayAPIDir = "gateway-api-crds"

	traefikGatewayClass   = "traefik"
	traefikGatewayCtrl    = "traefik.io/gateway-controller" // controllerName in pkg/provider/kubernetes/gateway/kubernetes.go
	traefikNamespace      = "traefik"
	traefikGateway        = "traefik"
	traefikListener       = "web"
	traefikClass          = "traefik"
	traefikIngressCtrl    = "traefik.io/ingress-controller" // traefikDefaultIngressClassController, pkg/provider/kubernetes/ingress
	nginxClass            = "nginx"                         // the ingress-nginx provider's default ingressClass
	nginxController       = "k8s.io/ingress-nginx"          // and its default controllerClass (SetDefaults, pkg/provider/kubernetes/ingress-nginx)
	gatewayAPIGroup       = "gateway.networking.k8s.io"
	gatewayAPIBundleLabel = gatewayAPIGroup + "/bundle-version"
)

var (
	crdGVR          = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	gatewayClassGVR = schema.GroupVersionResource{Group: gatewayAPIGroup, Version: "v1", Resource: "gatewayclasses"}
	gatewayGVR      = schema.GroupVersionResource{Group: gatewayAPIGroup, Version: "v1", Resource: "gateways"}
)

// installGatewayAPI creates the CRDs found in dir and waits until the API
// server serves them. It returns their bundle version.
func installGatewayAPI(ctx context.Context, dyn dynamic.Interface, dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no Gateway API CRDs in %s (run make cluster)", dir)
	}
	slices.Sort(files)
	var names []string
	version := ""
	for _, f := range files {
		objs, err := readObjects(f)
		if err != nil {
			return "", err
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if v := o.GetAnnotations()[gatewayAPIBundleLabel]; v != "" {
				version = v
			}
			if _, err := dyn.Resource(crdGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return "", fmt.Errorf("create CRD %s: %w", o.GetName(), err)
			}
			names = append(names, o.GetName())
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("no CustomResourceDefinition in %s (run make cluster)", dir)
	}
	for _, n := range names {
		if err := waitEstablished(ctx, dyn, n); err != nil {
			return "", err
		}
	}
	return version, nil
}

// readObjects decodes every document of a YAML file.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil && conditionTrue(crd, "Established") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// conditionTrue reads status.conditions[type=t].status of an object.
func conditionTrue(o *unstructured.Unstructured, t string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == t {
			return m["status"] == "True"
		}
	}
	return false
}

// createTraefikClasses creates the IngressClasses Traefik serves: traefik
// (its Ingress provider) and nginx (its ingress-nginx provider, as after a
// migration off ingress-nginx that kept the class), and its GatewayClass.
// def marks traefik as the cluster's default IngressClass.
func createTraefikClasses(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, def bool) error {
	for _, ic := range []struct{ name, ctrl string }{{traefikClass, traefikIngressCtrl}, {nginxClass, nginxController}} {
		obj := &networkingv1.IngressClass{
			ObjectMeta: metav1.ObjectMeta{Name: ic.name},
			Spec:       networkingv1.IngressClassSpec{Controller: ic.ctrl},
		}
		if def && ic.name == traefikClass {
			obj.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}
		}
		if _, err := c.NetworkingV1().IngressClasses().Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create IngressClass %s: %w", ic.name, err)
		}
	}
	gc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gatewayAPIGroup + "/v1",
		"kind":       "GatewayClass",
		"metadata":   map[string]any{"name": traefikGatewayClass},
		"spec":       map[string]any{"controllerName": traefikGatewayCtrl},
	}}
	if _, err := dyn.Resource(gatewayClassGVR).Create(ctx, gc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create GatewayClass %s: %w", traefikGatewayClass, err)
	}
	return nil
}

// createTraefikGateway creates the namespace traefik and its Gateway
// traefik, one HTTP listener on Traefik's web port, and waits until Traefik
// accepts it (its Accepted and Programmed conditions). It returns
// "traefik/traefik".
func createTraefikGateway(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, port int) (string, error) {
	if err := createNamespace(ctx, c, traefikNamespace); err != nil {
		return "", err
	}
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gatewayAPIGroup + "/v1",
		"kind":       "Gateway",
		"metadata":   map[string]any{"name": traefikGateway, "namespace": traefikNamespace},
		"spec": map[string]any{
			"gatewayClassName": traefikGatewayClass,
			"listeners": []any{map[string]any{
				"name":          traefikListener,
				"port":          int64(port),
				"protocol":      "HTTP",
				"allowedRoutes": map[string]any{"namespaces": map[string]any{"from": "All"}},
			}},
		},
	}}
	if _, err := dyn.Resource(gatewayGVR).Namespace(traefikNamespace).Create(ctx, gw, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create Gateway %s/%s: %w", traefikNamespace, traefikGateway, err)
	}
	ref := traefikNamespace + "/" + traefikGateway
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		got, err := dyn.Resource(gatewayGVR).Namespace(traefikNamespace).Get(wctx, traefikGateway, metav1.GetOptions{})
		if err == nil && conditionTrue(got, "Accepted") && conditionTrue(got, "Programmed") {
			return ref, nil
		}
		select {
		case <-wctx.Done():
			return "", fmt.Errorf("Gateway %s not accepted and programmed by Traefik within a minute (see traefik.log): %w", ref, wctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func createNamespace(ctx context.Context, c kubernetes.Interface, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}
