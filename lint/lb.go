package lint

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// AWS Load Balancer Controller annotations and labels
// (docs: guide/ingress/annotations.md, guide/service/annotations.md,
// deploy/pod_readiness_gate.md).
const (
	albPrefix          = "alb.ingress.kubernetes.io/"
	albTargetType      = albPrefix + "target-type"
	albTGAttributes    = albPrefix + "target-group-attributes"
	nlbTargetType      = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
	nlbType            = "service.beta.kubernetes.io/aws-load-balancer-type"
	nlbTGAttributes    = "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"
	deregistrationAttr = "deregistration_delay.timeout_seconds"
	// LabelReadinessGate turns on the controller's pod readiness gate
	// for a namespace's pods.
	LabelReadinessGate = "elbv2.k8s.aws/pod-readiness-gate-inject"
)

// ipTarget is a target group that registers pod IPs: an ALB Ingress
// backend, an NLB Service, or a TargetGroupBinding, in IP mode.
type ipTarget struct {
	obj      *Object
	services []string // in obj.Namespace
	delay    time.Duration
	// delayAt is the annotation the delay came from; for the default,
	// where the IP mode was set.
	delayAt   []any
	delayFrom string
}

func annotations(o *Object) map[string]string {
	m := map[string]string{}
	if md, ok := o.Raw["metadata"].(map[string]any); ok {
		if an, ok := md["annotations"].(map[string]any); ok {
			for k, v := range an {
				if s, ok := v.(string); ok {
					m[k] = s
				}
			}
		}
	}
	return m
}

// tgDelay reads deregistration_delay.timeout_seconds from a
// target-group-attributes value ("k=v,k=v").
func tgDelay(attrs string) (time.Duration, bool, error) {
	for _, kv := range strings.Split(attrs, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		if strings.TrimSpace(k) != deregistrationAttr {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("%s=%q is not a number of seconds", deregistrationAttr, v)
		}
		return time.Duration(n) * time.Second, true, nil
	}
	return 0, false, nil
}

// loadBalancers runs the AWS rules: deregistration delay against the
// preStop of the pods behind each IP-mode target group, and the readiness
// gate label on their namespace.
func (ck *checker) loadBalancers(objs []*Object, svcs map[*Object]*corev1.Service, wls []*workload) {
	svcByName := map[string]*Object{}
	for s := range svcs {
		svcByName[s.Namespace+"/"+s.Name] = s
	}
	namespaces := map[string]*Object{}
	for _, o := range objs {
		if o.Kind == "Namespace" && o.APIVersion == "v1" {
			namespaces[o.Name] = o
		}
	}
	var targets []ipTarget
	for _, o := range objs {
		switch {
		case o.Kind == "Ingress" && strings.HasPrefix(o.APIVersion, "networking.k8s.io/"):
			targets = append(targets, ck.albTargets(o, svcByName)...)
		case o.Kind == "Service" && o.APIVersion == "v1":
			if t, ok := ck.nlbTarget(o, svcs[o]); ok {
				targets = append(targets, t)
			}
		case o.Kind == "TargetGroupBinding" && strings.HasPrefix(o.APIVersion, "elbv2.k8s.aws/"):
			if t, ok := ck.tgbTarget(o); ok {
				targets = append(targets, t)
			}
		}
	}
	gated := map[string]bool{}
	for _, tg := range targets {
		cover, from := time.Duration(0), ""
		for _, name := range tg.services {
			s, ok := svcByName[tg.obj.Namespace+"/"+name]
			if !ok {
				continue
			}
			for _, w := range wls {
				if c, ok := ck.cover[w.obj]; ok && w.selectedBy(svcs[s], s.Namespace) && (from == "" || c < cover) {
					cover, from = c, fmt.Sprintf("the preStop of %s", w.obj.Ref())
				}
			}
		}
		if from == "" || cover == 0 {
			cover = time.Duration(ck.o.Target.PreStopSeconds()) * time.Second
			from = fmt.Sprintf("the preStop the number asks for (%s)", ck.o.Target.From)
		}
		if tg.delay >= cover {
			ck.add(tg.obj, RuleDeregistration, tg.delayAt, "deregistration delay %s (%s) is not below %s, %s",
				tg.delay, tg.delayFrom, from, cover)
		}
		if ns, ok := namespaces[tg.obj.Namespace]; ok && !gated[ns.Name] {
			gated[ns.Name] = true
			lbls, _ := ns.Raw["metadata"].(map[string]any)["labels"].(map[string]any)
			if v, _ := lbls[LabelReadinessGate].(string); v != "enabled" {
				ck.add(ns, RuleReadinessGate, []any{"metadata", "labels"}, "namespace %s holds IP targets of %s but lacks the label %s=enabled",
					ns.Name, tg.obj.Ref(), LabelReadinessGate)
			}
		}
	}
}

// albTargets are an ALB Ingress's backends in IP mode. A Service's own
// target-type and target-group-attributes annotations override the
// Ingress's (the controller reads both, the Service's first).
func (ck *checker) albTargets(o *Object, svcByName map[string]*Object) []ipTarget {
	ing := &networkingv1.Ingress{}
	if err := decodeInto(o.Raw, ing); err != nil {
		return nil
	}
	an := annotations(o)
	isALB := ing.Spec.IngressClassName != nil && *ing.Spec.IngressClassName == "alb" || an["kubernetes.io/ingress.class"] == "alb"
	for k := range an {
		isALB = isALB || strings.HasPrefix(k, albPrefix)
	}
	if !isALB {
		return nil
	}
	var names []string
	if b := ing.Spec.DefaultBackend; b != nil && b.Service != nil {
		names = append(names, b.Service.Name)
	}
	for _, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		for _, p := range r.HTTP.Paths {
			if p.Backend.Service != nil {
				names = append(names, p.Backend.Service.Name)
			}
		}
	}
	var out []ipTarget
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		holder, san := o, an
		if s, ok := svcByName[o.Namespace+"/"+name]; ok {
			if sa := annotations(s); sa[albTargetType] != "" || sa[albTGAttributes] != "" {
				holder, san = s, sa
			}
		}
		tt := an[albTargetType]
		if v := san[albTargetType]; v != "" {
			tt = v
		}
		if tt != "ip" {
			continue
		}
		attrs, attrHolder := an[albTGAttributes], o
		if v := san[albTGAttributes]; v != "" {
			attrs, attrHolder = v, holder
		}
		t := ipTarget{obj: o, services: []string{name}}
		ck.delayFrom(&t, attrHolder, attrs, albTGAttributes, albTargetType)
		out = append(out, t)
	}
	return out
}

// nlbTarget is a Service the controller exposes through an NLB in IP mode.
func (ck *checker) nlbTarget(o *Object, svc *corev1.Service) (ipTarget, bool) {
	an := annotations(o)
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer || (an[nlbTargetType] != "ip" && an[nlbType] != "nlb-ip") {
		return ipTarget{}, false
	}
	t := ipTarget{obj: o, services: []string{o.Name}}
	mode := nlbTargetType
	if an[nlbTargetType] == "" {
		mode = nlbType
	}
	ck.delayFrom(&t, o, an[nlbTGAttributes], nlbTGAttributes, mode)
	return t, true
}

// delayFrom sets t's delay from an attributes annotation on holder, or the
// AWS default.
func (ck *checker) delayFrom(t *ipTarget, holder *Object, attrs, attrKey, modeKey string) {
	t.delay, t.delayFrom, t.delayAt = defaultDeregistrationDelay, "the target group default", []any{"metadata", "annotations", modeKey}
	if attrs == "" {
		return
	}
	d, ok, err := tgDelay(attrs)
	switch {
	case err != nil:
		ck.add(holder, RuleAnnotationSyntax, []any{"metadata", "annotations", attrKey}, "%s: %v", attrKey, err)
	case ok:
		t.delay, t.delayFrom, t.delayAt = d, attrKey, []any{"metadata", "annotations", attrKey}
		if holder != t.obj {
			t.delayFrom = fmt.Sprintf("%s on %s", attrKey, holder.Ref())
		}
	}
}

// tgbTarget is a TargetGroupBinding in IP mode. The target group's
// attributes live in AWS, not in the binding: the annotation
// epwindow.io/deregistration-delay declares the delay, else the AWS
// default applies.
func (ck *checker) tgbTarget(o *Object) (ipTarget, bool) {
	spec, _ := o.Raw["spec"].(map[string]any)
	if tt, _ := spec["targetType"].(string); tt != "ip" {
		return ipTarget{}, false
	}
	ref, _ := spec["serviceRef"].(map[string]any)
	name, _ := ref["name"].(string)
	t := ipTarget{obj: o, services: []string{name}, delay: defaultDeregistrationDelay,
		delayFrom: "the target group default; declare it with " + AnnotationDeregistrationDelay,
		delayAt:   []any{"spec", "targetType"}}
	if v, ok := annotations(o)[AnnotationDeregistrationDelay]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			ck.add(o, RuleAnnotationSyntax, []any{"metadata", "annotations", AnnotationDeregistrationDelay}, "%s %q is not a duration such as 30s", AnnotationDeregistrationDelay, v)
		} else {
			t.delay, t.delayFrom, t.delayAt = d, AnnotationDeregistrationDelay, []any{"metadata", "annotations", AnnotationDeregistrationDelay}
		}
	}
	return t, true
}
