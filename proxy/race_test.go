//go:build race

package proxy

// raceEnabled reports that the race detector is on, which makes sync.Pool
// drop a share of what is put in it: allocation counts then mean nothing.
const raceEnabled = true
