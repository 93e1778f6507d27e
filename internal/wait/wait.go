// Package wait polls, for tests, a condition that nothing can announce: a
// real process coming up (redis-server, the edge binary), a socket
// closing, a file watcher noticing a change. Goroutines of the test's own
// process synchronise with channels or testing/synctest instead.
package wait

import (
	"testing"
	"time"
)

// maxInterval bounds the pause between two polls: short enough that a
// test is not slowed by much, long enough not to spin on a shared machine.
const maxInterval = 20 * time.Millisecond

// For calls cond until it returns true and returns how long that took. If
// within passes first it fails t with "timed out after <within> waiting for <what>". The
// pause between calls starts at a millisecond and doubles up to 20 ms. For
// must be called from the test's goroutine, as t.Fatal must.
func For(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	pause := time.Millisecond
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxInterval)
	}
	return time.Since(start)
}
