// Package freeport picks loopback TCP ports for the local cluster's
// components (etcd, Skipper), which are told their ports on the command line.
package freeport

import (
	"fmt"
	"net"
)

// Loopback returns n distinct loopback TCP ports that were free a moment
// ago: all n listeners are open at once, so the ports differ.
func Loopback(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
