package guard

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// left reports whether the peer of c's socket has shut down its side:
// poll(2) with no wait says POLLRDHUP for a FIN, POLLHUP or POLLERR for a
// reset, whatever unread bytes come before them (a pipelined request
// does not hide a close), where a peek would see those bytes first. One
// system call (BenchmarkLeft), made only for a forward the access log
// reports. The descriptor is read once, while the connection is open;
// a forward holds it open, and a poll of a descriptor closed meanwhile
// only answers wrong, for a connection whose answer is lost anyway.
func (c *guardConn) left() bool {
	if c.fd == 0 {
		c.fd = -1
		if sc, ok := c.sock.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				raw.Control(func(fd uintptr) { c.fd = int32(fd) })
			}
		}
	}
	if c.fd < 0 {
		return false
	}
	fds := [1]unix.PollFd{{Fd: c.fd, Events: unix.POLLIN | unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if err == unix.EINTR {
			continue
		}
		return n == 1 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
	}
}
