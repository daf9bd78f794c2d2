package deploy

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Labels every object of a run carries. The tool finds and deletes only
// objects in its own namespace; the labels are for people and selectors.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelRunID carries Params.RunID on every object and pod.
	LabelRunID = "epwindow.io/run-id"

	// NameValue and ManagedByValue are the values of LabelName and
	// LabelManagedBy in the base manifests.
	NameValue      = "epwindow-probe"
	ManagedByValue = "epwindow"
)

// ProbeContainer is the name of the probe's container in the Deployment.
const ProbeContainer = "probe"

// Defaults of Params' zero values.
const (
	// DefaultImage is the base manifest's image: the tag `make image` gives
	// the archive it writes (docker load / kind load image-archive).
	DefaultImage = "epwindow:latest"

	DefaultPort = 8080
	// DefaultGraceMargin is added to hold + preStop sleep when
	// Params.GracePeriod is 0: time for the probe to write its timeline and
	// exit after the hold before the kubelet's SIGKILL.
	DefaultGraceMargin = 10 * time.Second
)

// Params are one run's values for the probe workload. Render sets them on
// the objects built from the embedded manifests.
type Params struct {
	// Namespace holds everything; measure generates it (epwindow-xxxxx) or
	// takes an existing one (--namespace).
	Namespace string
	// Name of the Deployment, Service and Ingress, and the
	// app.kubernetes.io/instance label that selects the pods.
	Name     string
	Replicas int32
	// Image of the probe; its command is `epwindow probe …` (the image has
	// epwindow on PATH).
	Image string
	// IngressClass sets spec.ingressClassName; "" keeps the overlay's class,
	// or none (the cluster's default class) with the base.
	IngressClass string
	// Host is the Ingress rule's host; "" matches any host.
	Host string
	// Port the probe listens on (containerPort, probes, hook, Service port);
	// 0 means DefaultPort.
	Port int32
	// Hold is the probe's --hold: how long it keeps serving after SIGTERM
	// unless released.
	Hold time.Duration
	// GracePeriod is terminationGracePeriodSeconds (rounded up to whole
	// seconds); 0 means Hold + PreStopSleep + GraceMargin, because the grace
	// period includes the preStop hook and the hold starts at SIGTERM.
	GracePeriod time.Duration
	// GraceMargin is what a GracePeriod of 0 adds for the probe to write its
	// timeline and exit; 0 means DefaultGraceMargin.
	GraceMargin time.Duration
	// PreStop installs the preStop httpGet /prestop hook.
	PreStop bool
	// PreStopSleep, when > 0, makes the hook GET /prestop?sleep=<d>, which the
	// probe answers after d: the pod keeps serving d before SIGTERM. This is
	// how a recommended preStop is applied. Needs PreStop.
	PreStopSleep time.Duration
	// ExitOnSigterm makes the probe exit at once on SIGTERM (the incident's
	// app).
	ExitOnSigterm bool
	// RefuseOnSigterm makes the probe refuse new connections from SIGTERM
	// on and exit after Hold (verify's broken canary).
	RefuseOnSigterm bool
	// ClockOffset is the probe's --clock-offset (fault injection).
	ClockOffset time.Duration
	// ListenDelay is the probe's --listen-delay: it opens its listener only
	// after this long, like an app loading its configuration first.
	ListenDelay time.Duration
	// NoReadiness drops the readiness probe (--readiness=false): the
	// kubelet then reports the pod Ready as soon as its container runs
	// (pkg/kubelet/prober/prober_manager.go, UpdatePodStatus: no readiness
	// prober means ready once started), so the pod enters the EndpointSlice
	// before it listens when ListenDelay is set.
	NoReadiness bool
	// Overlay is the overlay to build (Overlays() or BaseOverlay); "" picks
	// the overlay named like IngressClass, else the base. Ingress only.
	Overlay string
	// Route is RouteIngress ("" too) or RouteHTTPRoute: the latter builds
	// deploy/httproute, whose HTTPRoute replaces the Ingress and attaches
	// to Gateway.
	Route   string
	Gateway GatewayRef
	// StreamDrain is the probe's --stream-drain ("" leaves its default,
	// none): how it ends its WebSocket and gRPC streams at termination.
	StreamDrain string
	// H2C annotates the Service for Traefik to reach the probe over h2c
	// (AnnotationTraefikScheme): gRPC through Traefik needs it.
	H2C bool
	// Headless adds a headless Service (HeadlessName) selecting the same
	// pods: the name DNS clients resolve to the pods' own addresses, whose
	// answers measure --dns times.
	Headless bool
	// HeadlessPublishNotReady sets the headless Service's
	// publishNotReadyAddresses: a terminating pod's endpoint then stays
	// ready in its slice, and in DNS, until the pod is gone (what EPW012
	// warns about), to measure how much longer that is.
	HeadlessPublishNotReady bool
	// GRPC opens the probe's own gRPC port (GRPCPort: --grpc-listen), where
	// grpc-go's server applies GRPCMaxConnectionAge (--grpc-max-connection-age,
	// 0: none): the port a gRPC client resolving the headless Service calls.
	GRPC                 bool
	GRPCMaxConnectionAge time.Duration
	// RunID, when set, is the LabelRunID value on every object and pod, and
	// part of the pods' selector.
	RunID string
	// Labels are added to every object and to the pod template. They may not
	// override the labels above.
	Labels map[string]string
}

// Workload is the rendered probe workload of one run, in apply order.
// Exactly one of Ingress and HTTPRoute is set, by Params.Route.
type Workload struct {
	Namespace  *corev1.Namespace
	Deployment *appsv1.Deployment
	Service    *corev1.Service
	// Headless is the headless Service (clusterIP: None) over the same
	// pods when Params.Headless is set, else nil.
	Headless *corev1.Service
	Ingress  *networkingv1.Ingress
	// HTTPRoute is unstructured: the Gateway API's Go types are not a
	// dependency, and the dynamic client creates it as it is.
	HTTPRoute *unstructured.Unstructured
}

// Validate checks the parameters; messages name the flag to change.
func (p Params) Validate() error {
	if errs := validation.IsDNS1123Label(p.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q (--namespace): %s", p.Namespace, strings.Join(errs, "; "))
	}
	// Service names must be DNS-1035 labels (start with a letter).
	if errs := validation.IsDNS1035Label(p.Name); len(errs) > 0 {
		return fmt.Errorf("name %q (--name): %s", p.Name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1035Label(HeadlessName(p.Name)); p.Headless && len(errs) > 0 {
		return fmt.Errorf("name %q (--name): the headless Service %q: %s", p.Name, HeadlessName(p.Name), strings.Join(errs, "; "))
	}
	if p.Replicas < 1 {
		return fmt.Errorf("--replicas (%d) must be at least 1", p.Replicas)
	}
	if strings.TrimSpace(p.Image) == "" || strings.ContainsAny(p.Image, " \t\n") {
		return fmt.Errorf("--image %q: must name an image, e.g. registry.example.com/epwindow:v1", p.Image)
	}
	if p.Port < 0 || p.Port > math.MaxUint16 {
		return fmt.Errorf("port %d: must be 1-65535 (0 means %d)", p.Port, DefaultPort)
	}
	if p.Host != "" {
		h := strings.TrimPrefix(p.Host, "*.")
		if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
			return fmt.Errorf("--host %q: %s", p.Host, strings.Join(errs, "; "))
		}
	}
	if p.IngressClass != "" {
		if errs := validation.IsDNS1123Subdomain(p.IngressClass); len(errs) > 0 {
			return fmt.Errorf("--ingress-class %q: %s", p.IngressClass, strings.Join(errs, "; "))
		}
	}
	if err := ValidateRoute(p.Route, p.Gateway, p.IngressClass, p.Overlay); err != nil {
		return err
	}
	if p.Hold <= 0 {
		return fmt.Errorf("--hold (%s) must be positive", p.Hold)
	}
	if p.PreStopSleep < 0 {
		return fmt.Errorf("--prestop-sleep (%s) must not be negative", p.PreStopSleep)
	}
	if p.PreStopSleep > 0 && !p.PreStop {
		return fmt.Errorf("--prestop-sleep (%s) needs the preStop hook (--prestop)", p.PreStopSleep)
	}
	if p.ListenDelay < 0 {
		return fmt.Errorf("--listen-delay (%s) must not be negative", p.ListenDelay)
	}
	if p.GracePeriod < 0 {
		return fmt.Errorf("--grace (%s) must not be negative", p.GracePeriod)
	}
	if p.GRPCMaxConnectionAge < 0 {
		return fmt.Errorf("--grpc-max-connection-age (%s) must not be negative", p.GRPCMaxConnectionAge)
	}
	if p.GRPCMaxConnectionAge > 0 && !p.GRPC {
		return fmt.Errorf("--grpc-max-connection-age (%s) needs the probe's gRPC port (--grpc-dns-rate)", p.GRPCMaxConnectionAge)
	}
	if p.GraceMargin < 0 {
		return fmt.Errorf("--grace-margin (%s) must not be negative", p.GraceMargin)
	}
	if p.GracePeriod > 0 {
		// The grace period includes the preStop hook's time
		// (pkg/kubelet/kuberuntime/kuberuntime_container.go, killContainer);
		// a probe killed before its hold ends loses its timeline.
		need := p.PreStopSleep
		what := fmt.Sprintf("the preStop sleep (%s)", p.PreStopSleep)
		if !p.ExitOnSigterm {
			need += p.Hold
			what = fmt.Sprintf("--hold (%s) + the preStop sleep (%s)", p.Hold, p.PreStopSleep)
		}
		if p.GracePeriod <= need {
			return fmt.Errorf("--grace (%s) must exceed %s: the kubelet kills the probe at the end of the grace period", p.GracePeriod, what)
		}
	}
	if err := validateLabels(p.Labels); err != nil {
		return err
	}
	if p.RunID != "" {
		if errs := validation.IsValidLabelValue(p.RunID); len(errs) > 0 {
			return fmt.Errorf("run id %q: %s", p.RunID, strings.Join(errs, "; "))
		}
	}
	return nil
}

// validateLabels checks the --label values.
func validateLabels(labels map[string]string) error {
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q (--label): %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label %s=%q (--label): %s", k, v, strings.Join(errs, "; "))
		}
		switch k {
		case LabelName, LabelInstance, LabelManagedBy, LabelRunID:
			return fmt.Errorf("label %q (--label) is set by epwindow itself", k)
		}
	}
	return nil
}

// OverlayFor returns the overlay Render builds: p.Overlay if set, else the
// overlay named like the ingress class, else the base; with an HTTPRoute,
// HTTPRouteOverlay.
func (p Params) OverlayFor() string {
	if p.Route == RouteHTTPRoute {
		return HTTPRouteOverlay
	}
	if p.Overlay != "" {
		return p.Overlay
	}
	for _, o := range Overlays() {
		if o == p.IngressClass {
			return o
		}
	}
	return BaseOverlay
}

// Grace is the terminationGracePeriodSeconds Render sets.
func (p Params) Grace() int64 {
	g := p.GracePeriod
	if g == 0 {
		margin := p.GraceMargin
		if margin == 0 {
			margin = DefaultGraceMargin
		}
		g = p.PreStopSleep + margin
		if !p.ExitOnSigterm {
			g += p.Hold
		}
	}
	return int64(math.Ceil(g.Seconds()))
}

func (p Params) port() int32 {
	if p.Port == 0 {
		return DefaultPort
	}
	return p.Port
}

// Render builds the overlay for p from the embedded manifests and sets the
// run's values on the objects.
func Render(p Params) (*Workload, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	dir := HTTPRouteOverlay
	if p.Route != RouteHTTPRoute {
		var err error
		if dir, err = overlayDir(p.OverlayFor()); err != nil {
			return nil, err
		}
	}
	m, err := kustomize(dir)
	if err != nil {
		return nil, err
	}
	wl := &Workload{}
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("deploy/%s: %s: %w", dir, r.CurId(), err)
		}
		var target any
		switch kind := r.GetKind(); kind {
		case "Namespace":
			wl.Namespace = &corev1.Namespace{}
			target = wl.Namespace
		case "Deployment":
			wl.Deployment = &appsv1.Deployment{}
			target = wl.Deployment
		case "Service":
			wl.Service = &corev1.Service{}
			target = wl.Service
		case "Ingress":
			wl.Ingress = &networkingv1.Ingress{}
			target = wl.Ingress
		case "HTTPRoute":
			// No typed API to decode strictly into: applyHTTPRoute checks
			// the fields it sets. Through JSON, so that numbers are the
			// int64 the dynamic client's codec expects.
			js, err := yaml.YAMLToJSON(data)
			if err != nil {
				return nil, fmt.Errorf("deploy/%s: decode %s: %w", dir, r.CurId(), err)
			}
			wl.HTTPRoute = &unstructured.Unstructured{}
			if err := wl.HTTPRoute.UnmarshalJSON(js); err != nil {
				return nil, fmt.Errorf("deploy/%s: decode %s: %w", dir, r.CurId(), err)
			}
			continue
		default:
			return nil, fmt.Errorf("deploy/%s: unexpected %s %q: the probe workload is a Namespace, a Deployment, a Service and an Ingress or HTTPRoute", dir, kind, r.GetName())
		}
		// Strict: a field the typed API does not know is a typo in the YAML.
		if err := yaml.UnmarshalStrict(data, target); err != nil {
			return nil, fmt.Errorf("deploy/%s: decode %s: %w", dir, r.CurId(), err)
		}
	}
	if wl.Namespace == nil || wl.Deployment == nil || wl.Service == nil || (wl.Ingress == nil) == (wl.HTTPRoute == nil) {
		return nil, fmt.Errorf("deploy/%s: want a Namespace, a Deployment, a Service and either an Ingress or an HTTPRoute", dir)
	}
	if err := p.apply(wl); err != nil {
		return nil, fmt.Errorf("deploy/%s: %w", dir, err)
	}
	return wl, nil
}

// apply sets p's values on the decoded objects.
func (p Params) apply(wl *Workload) error {
	port := p.port()
	// Names and labels.
	wl.Namespace.Name = p.Namespace
	p.label(wl.Namespace.Labels, false)
	metas := []*metav1.ObjectMeta{&wl.Deployment.ObjectMeta, &wl.Service.ObjectMeta}
	if wl.Ingress != nil {
		metas = append(metas, &wl.Ingress.ObjectMeta)
	}
	for _, m := range metas {
		m.Name = p.Name
		m.Namespace = p.Namespace
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		p.label(m.Labels, true)
	}
	d := wl.Deployment
	if d.Spec.Template.Labels == nil {
		d.Spec.Template.Labels = map[string]string{}
	}
	p.label(d.Spec.Template.Labels, true)
	sel := p.selector()
	d.Spec.Selector.MatchLabels = sel
	wl.Service.Spec.Selector = p.selector()
	if p.H2C {
		if wl.Service.Annotations == nil {
			wl.Service.Annotations = map[string]string{}
		}
		wl.Service.Annotations[AnnotationTraefikScheme] = "h2c"
	}
	replicas := p.Replicas
	d.Spec.Replicas = &replicas

	// Pod.
	grace := p.Grace()
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = &grace
	c := container(d)
	if c == nil {
		return fmt.Errorf("deployment has no container %q", ProbeContainer)
	}
	c.Image = p.Image
	c.Command = p.command(c.Command)
	found := false
	for i := range c.Ports {
		if c.Ports[i].Name == "http" {
			c.Ports[i].ContainerPort = port
			found = true
		}
	}
	if !found {
		return fmt.Errorf("container %q has no port named http", ProbeContainer)
	}
	if p.GRPC {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "grpc", ContainerPort: p.GRPCPort(), Protocol: corev1.ProtocolTCP})
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		return fmt.Errorf("container %q has no httpGet readiness probe", ProbeContainer)
	}
	c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(port)
	if p.NoReadiness {
		c.ReadinessProbe = nil
	}
	if !p.PreStop {
		c.Lifecycle = nil
	} else {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.HTTPGet == nil {
			return fmt.Errorf("container %q has no httpGet preStop hook", ProbeContainer)
		}
		h := c.Lifecycle.PreStop.HTTPGet
		h.Port = intstr.FromInt32(port)
		h.Path = PreStopPath(p.PreStopSleep)
	}

	// Service and Ingress or HTTPRoute.
	for i := range wl.Service.Spec.Ports {
		wl.Service.Spec.Ports[i].Port = port
		wl.Service.Spec.Ports[i].TargetPort = intstr.FromInt32(port)
	}
	if p.Headless {
		wl.Headless = headless(wl.Service, p.HeadlessPublishNotReady)
	}
	if wl.HTTPRoute != nil {
		return p.applyHTTPRoute(wl.HTTPRoute)
	}
	ing := wl.Ingress
	if p.IngressClass != "" {
		class := p.IngressClass
		ing.Spec.IngressClassName = &class
	}
	for i := range ing.Spec.Rules {
		ing.Spec.Rules[i].Host = p.Host
		if ing.Spec.Rules[i].HTTP == nil {
			continue
		}
		for j := range ing.Spec.Rules[i].HTTP.Paths {
			b := &ing.Spec.Rules[i].HTTP.Paths[j].Backend
			if b.Service != nil {
				b.Service.Name = p.Name
				b.Service.Port = networkingv1.ServiceBackendPort{Number: port}
			}
		}
	}
	return nil
}

// PreStopPath is the preStop hook's path: /prestop, or /prestop?sleep=<d>
// (a Go duration) when d > 0.
func PreStopPath(d time.Duration) string {
	if d <= 0 {
		return "/prestop"
	}
	return "/prestop?" + url.Values{"sleep": {d.String()}}.Encode()
}

// probeFlags are the probe flags Render owns: any occurrence in the
// manifest's command is replaced by the run's value.
var probeFlags = []string{"--listen", "--listen-delay", "--hold", "--exit-on-sigterm", "--clock-offset", "--stream-drain",
	"--grpc-listen", "--grpc-max-connection-age"}

// command returns the manifest's command without the flags Render owns,
// followed by the run's values of those flags.
func (p Params) command(base []string) []string {
	var out []string
	for _, a := range base {
		owned := false
		for _, f := range probeFlags {
			if a == f || strings.HasPrefix(a, f+"=") {
				owned = true
			}
		}
		if !owned {
			out = append(out, a)
		}
	}
	out = append(out,
		fmt.Sprintf("--listen=:%d", p.port()),
		"--hold="+p.Hold.String())
	if p.ExitOnSigterm {
		out = append(out, "--exit-on-sigterm")
	}
	if p.RefuseOnSigterm {
		out = append(out, "--refuse-on-sigterm")
	}
	if p.ClockOffset != 0 {
		out = append(out, "--clock-offset="+p.ClockOffset.String())
	}
	if p.ListenDelay > 0 {
		out = append(out, "--listen-delay="+p.ListenDelay.String())
	}
	if p.StreamDrain != "" {
		out = append(out, "--stream-drain="+p.StreamDrain)
	}
	if p.GRPC {
		out = append(out, fmt.Sprintf("--grpc-listen=:%d", p.GRPCPort()))
		if p.GRPCMaxConnectionAge > 0 {
			out = append(out, "--grpc-max-connection-age="+p.GRPCMaxConnectionAge.String())
		}
	}
	return out
}

// GRPCPort is the probe's gRPC port (Params.GRPC): the one after its
// main port.
func (p Params) GRPCPort() int32 { return p.port() + 1 }

// AnnotationTraefikScheme is the Service annotation by which Traefik picks
// the scheme it speaks to the endpoints; h2c (HTTP/2 without TLS) is what
// gRPC to a cleartext backend needs (traefik v3.6
// pkg/provider/kubernetes/ingress/annotations.go, ServersScheme; without it
// Traefik speaks HTTP/1.1 and a gRPC request fails).
const AnnotationTraefikScheme = "traefik.ingress.kubernetes.io/service.serversscheme"

// label adds the run's labels to m; withInstance also sets LabelInstance.
func (p Params) label(m map[string]string, withInstance bool) {
	for k, v := range p.Labels {
		m[k] = v
	}
	m[LabelManagedBy] = ManagedByValue
	if withInstance {
		m[LabelName] = NameValue
		m[LabelInstance] = p.Name
	}
	if p.RunID != "" {
		m[LabelRunID] = p.RunID
	}
}

// selector selects the run's probe pods.
func (p Params) selector() map[string]string {
	s := map[string]string{LabelName: NameValue, LabelInstance: p.Name}
	if p.RunID != "" {
		s[LabelRunID] = p.RunID
	}
	return s
}

// container returns the probe container of d, or nil.
func container(d *appsv1.Deployment) *corev1.Container {
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == ProbeContainer {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// HeadlessSuffix makes the headless Service's name from the workload's.
const HeadlessSuffix = "-headless"

// HeadlessName is the headless Service's name for a workload name.
func HeadlessName(name string) string { return name + HeadlessSuffix }

// headless is svc without a cluster IP: the cluster DNS answers its name
// with the ready endpoints' own addresses (CoreDNS's kubernetes plugin,
// plugin/kubernetes/kubernetes.go: a headless Service's records are its
// endpoints), and kube-proxy programs nothing for it. Without
// publishNotReady, as a Deployment's Service should be, a terminating
// pod's endpoint turns ready=false at its deletion and DNS stops answering
// it; with it (EPW012 flags that, Params.HeadlessPublishNotReady sets it to
// measure), the endpoint stays ready until the pod is gone.
func headless(svc *corev1.Service, publishNotReady bool) *corev1.Service {
	h := svc.DeepCopy()
	h.Name = HeadlessName(svc.Name)
	h.Annotations = nil
	h.Spec.Type = corev1.ServiceTypeClusterIP
	h.Spec.ClusterIP = corev1.ClusterIPNone
	h.Spec.ClusterIPs = nil
	h.Spec.PublishNotReadyAddresses = publishNotReady
	return h
}
