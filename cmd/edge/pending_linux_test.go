package main

import (
	"net"
	"syscall"
)

// pendingAccept reports whether a connection waits in ln's backlog, made
// but not yet accepted.
func pendingAccept(ln net.Listener) bool {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	_ = rc.Control(func(fd uintptr) {
		var set syscall.FdSet
		set.Bits[fd/64] |= 1 << (fd % 64)
		tv := syscall.Timeval{}
		n, err := syscall.Select(int(fd)+1, &set, nil, nil, &tv)
		pending = err == nil && n > 0
	})
	return pending
}
