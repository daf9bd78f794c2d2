package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
)

func TestClassify(t *testing.T) {
	opErr := func(op string, errno error) error {
		return &url.Error{Op: "Get", URL: "http://x/", Err: &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}}
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"refused on dial", opErr("dial", syscall.ECONNREFUSED), KindRefused},
		{"reset on read", opErr("read", syscall.ECONNRESET), KindReset},
		{"broken pipe on write", opErr("write", syscall.EPIPE), KindReset},
		{"no route", opErr("dial", syscall.EHOSTUNREACH), KindUnreachable},
		{"deadline", &url.Error{Op: "Get", URL: "http://x/", Err: context.DeadlineExceeded}, KindTimeout},
		{"dial timeout", opErr("dial", syscall.ETIMEDOUT), KindTimeout},
		{"eof", &url.Error{Op: "Get", URL: "http://x/", Err: io.EOF}, KindEOF},
		{"unexpected eof in body", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), KindEOF},
		{"server closed idle", &url.Error{Op: "Get", URL: "http://x/", Err: errors.New("http: server closed idle connection")}, KindEOF},
		{"anything else", errors.New("tls: handshake failure"), KindOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.err); got != tt.want {
				t.Errorf("classify(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
