//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import "syscall"

// alive reports whether an idle origin connection is still open and has
// sent nothing: what the transport's reader, which reads every idle
// connection, would know of it. It peeks without waiting.
func (oc *originConn) alive() bool {
	if oc.br != nil && oc.br.Buffered() > 0 {
		return false
	}
	sc, ok := oc.conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	alive := false
	err = rc.Control(func(fd uintptr) {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
	})
	return err == nil && alive
}
