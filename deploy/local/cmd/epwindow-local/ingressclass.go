package main

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// skipperClass is the IngressClass a Skipper install creates (the Helm
// chart's default name), marked as the cluster's default class, as on a real
// cluster: tools that check --ingress-class, or pick an observer from the
// class's controller, find it. Skipper itself serves class "skipper" and
// class-less Ingresses with or without the object.
const (
	skipperClass      = "skipper"
	skipperController = "zalando.org/skipper"
)

func createIngressClass(ctx context.Context, c kubernetes.Interface) error {
	ic := &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: skipperClass, Annotations: map[string]string{
			networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec: networkingv1.IngressClassSpec{Controller: skipperController},
	}
	_, err := c.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create IngressClass %s: %w", skipperClass, err)
	}
	return nil
}
