//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package netpeek

import (
	"net"
	"syscall"
)

// Pending reports, without waiting, whether c has bytes or its end (or an
// error) waiting to be read; ok is false where that cannot be told.
func Pending(c net.Conn) (pending, ok bool) {
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var b [1]byte
	err = rc.Control(func(fd uintptr) {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		pending = rerr != syscall.EAGAIN && rerr != syscall.EWOULDBLOCK
	})
	return pending, err == nil
}
