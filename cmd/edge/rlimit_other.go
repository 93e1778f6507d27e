//go:build !unix

package main

// openFileLimit returns 0: there is no open-file limit to read here.
func openFileLimit() uint64 { return 0 }
