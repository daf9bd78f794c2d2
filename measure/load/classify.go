package load

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// classify names the failure kind of a transport error (see the Kind*
// constants). It looks at the error chain, not at messages, except for the
// net/http sentinels that are not exported.
func classify(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	// EPIPE: the peer reset (or closed) the connection while the request
	// was being written; for the client it is the same event as a reset.
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return KindReset
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return KindUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return KindTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return KindEOF
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return KindTimeout
	}
	// net/http's errServerClosedIdle (transport.go) is unexported: a reused
	// keep-alive connection was closed by the server, i.e. an EOF.
	if strings.Contains(err.Error(), "server closed idle connection") {
		return KindEOF
	}
	return KindOther
}

// statusKind names the failure kind of a non-2xx status code.
func statusKind(code int) string { return "status_" + strconv.Itoa(code) }
