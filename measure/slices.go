package measure

import (
	"net/netip"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// endpointState is one address's conditions across every EndpointSlice of a
// Service. The EndpointSlice controller keeps a deleted pod's endpoint with
// ready=false, serving=<pod Ready>, terminating=true until the pod object is
// gone (k8s.io/endpointslice utils.go podToEndpoint), and an address can move
// between the slices of one Service, so the state is taken over all of them.
type endpointState struct {
	Ready       bool
	Serving     bool
	Terminating bool
}

// addressState returns addr's conditions over slices, and whether addr is in
// any of them. Nil conditions mean true for ready and serving and false for
// terminating, as the discovery/v1 API documents. When an address appears in
// several slices (mid-move), it counts as ready/serving if any copy is, since a
// consumer merging slices would still route to it.
func addressState(slices []*discoveryv1.EndpointSlice, addr netip.Addr) (endpointState, bool) {
	var st endpointState
	found := false
	for _, s := range slices {
		if s == nil || !sliceFamilyMatches(s, addr) {
			continue
		}
		for _, ep := range s.Endpoints {
			if !hasAddress(ep.Addresses, addr) {
				continue
			}
			c := ep.Conditions
			ready := c.Ready == nil || *c.Ready
			serving := c.Serving == nil || *c.Serving
			terminating := c.Terminating != nil && *c.Terminating
			if !found {
				st = endpointState{Ready: ready, Serving: serving, Terminating: terminating}
				found = true
				continue
			}
			st.Ready = st.Ready || ready
			st.Serving = st.Serving || serving
			st.Terminating = st.Terminating && terminating
		}
	}
	return st, found
}

func sliceFamilyMatches(s *discoveryv1.EndpointSlice, addr netip.Addr) bool {
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4:
		return addr.Is4()
	case discoveryv1.AddressTypeIPv6:
		return addr.Is6()
	default:
		return false
	}
}

func hasAddress(addrs []string, addr netip.Addr) bool {
	for _, a := range addrs {
		if p, err := netip.ParseAddr(a); err == nil && p == addr {
			return true
		}
	}
	return false
}

// sliceHolds tells whether s lists addr.
func sliceHolds(s *discoveryv1.EndpointSlice, addr netip.Addr) bool {
	if s == nil || !sliceFamilyMatches(s, addr) {
		return false
	}
	for _, ep := range s.Endpoints {
		if hasAddress(ep.Addresses, addr) {
			return true
		}
	}
	return false
}

// holdingSlice names the slice that lists addr, "" when none does; if
// several do (an address mid-move), the first by name.
func holdingSlice(slices []*discoveryv1.EndpointSlice, addr netip.Addr) string {
	name := ""
	for _, s := range slices {
		if sliceHolds(s, addr) && (name == "" || s.Name < name) {
			name = s.Name
		}
	}
	return name
}
