package serve

import (
	"errors"
	"net"
	"syscall"
)

func canPeek(c net.Conn) bool {
	_, ok := c.(syscall.Conn)
	return ok
}

// peerClosed peeks one byte without blocking: 0 bytes is end-of-file (the
// peer closed), EAGAIN means open and idle, another error (a reset) means
// gone. ok is false if the check could not be made.
func peerClosed(c net.Conn) (closed, ok bool) {
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var buf [1]byte
	cerr := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			closed = false
		case err != nil:
			closed = true
		default:
			closed = n == 0
		}
		return true // never wait for readability
	})
	if cerr != nil {
		return false, false // the server closed the connection itself
	}
	return closed, true
}
