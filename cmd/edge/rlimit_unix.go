//go:build unix

package main

import "syscall"

// openFileLimit returns the process's open-file limit (the soft
// RLIMIT_NOFILE), or 0 if it cannot be read. Go raises the soft limit to
// the hard limit when the process starts, so this is usually the hard limit.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}
