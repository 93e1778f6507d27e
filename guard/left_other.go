//go:build !linux

package guard

// left is false where poll(2) cannot tell a peer's FIN: a client that
// left is then found by the write that fails.
func (c *guardConn) left() bool { return false }
