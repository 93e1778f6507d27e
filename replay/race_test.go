//go:build race

package replay

// raceEnabled reports that the race detector is on; a few tests then use
// fewer sources to stay within CI's time budget.
const raceEnabled = true
