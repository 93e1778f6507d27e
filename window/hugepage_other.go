//go:build !linux

package window

// adviseHugePages does nothing where transparent huge pages cannot be
// requested with madvise.
func adviseHugePages([]entry) {}
