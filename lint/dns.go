package lint

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// peerKinds are the workloads whose pods find each other through a headless
// Service before they are Ready: a StatefulSet's governing Service (etcd,
// Cassandra bootstrap) and an indexed Job's (JobSet's
// network.publishNotReadyAddresses). That discovery needs not-ready
// addresses, and no client drains from them.
var peerKinds = []string{"StatefulSet", "Job", "CronJob"}

// headlessNotReady flags headless Services that publish not-ready addresses
// of pods clients reach by name. CoreDNS answers a headless name with the
// slice's ready endpoints only (coredns/coredns
// plugin/kubernetes/object/endpoint.go, EndpointSliceToEndpoints skips
// !endpointsliceReady). The EndpointSlice controller turns a pod's endpoint
// ready=false at its deletion timestamp unless the Service publishes
// not-ready addresses (kubernetes/kubernetes
// staging/src/k8s.io/endpointslice/utils.go, podToEndpoint:
// `ready := service.Spec.PublishNotReadyAddresses || (serving && !terminating)`),
// so with it DNS keeps answering the address until the endpoint leaves the
// slice, and the window no longer ends at deletion.
func (ck *checker) headlessNotReady(svcs map[*Object]*corev1.Service, wls []*workload) {
	for s, svc := range svcs {
		if !svc.Spec.PublishNotReadyAddresses || !headless(svc) {
			continue
		}
		var behind []string
		for _, w := range wls {
			if !slices.Contains(peerKinds, w.obj.Kind) && w.selectedBy(svc, s.Namespace) {
				behind = append(behind, w.obj.Ref())
			}
		}
		if len(behind) > 0 {
			ck.add(s, RuleHeadlessNotReady, []any{"spec", "publishNotReadyAddresses"},
				"headless Service publishes the not-ready addresses of %s: DNS answers a deleted pod's address until its endpoint leaves the slice",
				strings.Join(behind, ", "))
		}
	}
}

// headless reports whether a Service has no cluster IP. The API server
// copies clusterIPs[0] into clusterIP, so a manifest may set either.
func headless(svc *corev1.Service) bool {
	ip := svc.Spec.ClusterIP
	if ip == "" && len(svc.Spec.ClusterIPs) > 0 {
		ip = svc.Spec.ClusterIPs[0]
	}
	return ip == corev1.ClusterIPNone
}
