//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"net"
	"syscall"
)

// readable reports whether c has bytes or its end waiting to be read.
func readable(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	ready := false
	_ = rc.Control(func(fd uintptr) {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ready = err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
	})
	return ready
}
