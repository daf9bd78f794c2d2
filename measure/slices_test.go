package measure

import (
	"net/netip"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func slice(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps}
}

func ep(addr string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{
		Ready: ready, Serving: serving, Terminating: terminating}}
}

func TestAddressState(t *testing.T) {
	addr := netip.MustParseAddr("10.244.0.7")
	tr, fa := ptr.To(true), ptr.To(false)
	tests := []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   endpointState
		found  bool
	}{
		{"absent", []*discoveryv1.EndpointSlice{slice(ep("10.244.0.8", tr, tr, fa))}, endpointState{}, false},
		{"no slices", nil, endpointState{}, false},
		{"ready", []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", tr, tr, fa))}, endpointState{Ready: true, Serving: true}, true},
		{"nil conditions mean ready and serving", []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", nil, nil, nil))}, endpointState{Ready: true, Serving: true}, true},
		{"terminating still serving", []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", fa, tr, tr))}, endpointState{Serving: true, Terminating: true}, true},
		{"terminating not serving", []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", fa, fa, tr))}, endpointState{Terminating: true}, true},
		{"second slice", []*discoveryv1.EndpointSlice{slice(ep("10.244.0.8", tr, tr, fa)), slice(ep("10.244.0.7", fa, tr, tr))}, endpointState{Serving: true, Terminating: true}, true},
		{"moving between slices: any ready copy counts", []*discoveryv1.EndpointSlice{slice(ep("10.244.0.7", fa, fa, tr)), slice(ep("10.244.0.7", tr, tr, fa))}, endpointState{Ready: true, Serving: true}, true},
		{"ipv6 slice ignored for ipv4 address", []*discoveryv1.EndpointSlice{{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []discoveryv1.Endpoint{ep("10.244.0.7", tr, tr, fa)}}}, endpointState{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found := addressState(tt.slices, addr)
			if found != tt.found || got != tt.want {
				t.Fatalf("addressState = %+v, %v; want %+v, %v", got, found, tt.want, tt.found)
			}
		})
	}
}
