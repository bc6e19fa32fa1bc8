// Package sockpair gives tests a connected pair of unix sockets as
// net.Conns: in-process, no listener, each end a syscall.Conn (so code
// that reads a TCP socket with readv takes the same path), with half-close
// (CloseWrite) and, unlike a TCP socket closed with unread input, no reset
// that could discard what the other end already sent.
package sockpair

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// New returns the two ends of a fresh socketpair(AF_UNIX, SOCK_STREAM);
// the caller closes both. It fails tb when the system refuses.
func New(tb testing.TB) (a, b *net.UnixConn) {
	tb.Helper()
	return pair(tb, syscall.SOCK_STREAM)
}

// NewPacket is New for SOCK_SEQPACKET: one message per write, as a
// "unixpacket" connection (ReadMsgUnix and WriteMsgUnix carry descriptors).
func NewPacket(tb testing.TB) (a, b *net.UnixConn) {
	tb.Helper()
	return pair(tb, syscall.SOCK_SEQPACKET)
}

func pair(tb testing.TB, typ int) (a, b *net.UnixConn) {
	tb.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, typ|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("socketpair: %v", err)
	}
	conn := func(fd int, name string) *net.UnixConn {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close() // FileConn holds its own duplicate
		c, err := net.FileConn(f)
		if err != nil {
			tb.Fatalf("socketpair %s: %v", name, err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0], "a"), conn(fds[1], "b")
}
