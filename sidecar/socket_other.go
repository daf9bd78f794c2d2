//go:build !linux

package sidecar

// KernelDumper fails off Linux: inet_diag is Linux's.
func KernelDumper() (Dumper, func(), error) {
	return nil, nil, ErrUnsupported
}
