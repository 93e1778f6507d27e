package window

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms Go
// supports on Linux, except those (some arm64 and ppc64 kernels) with larger
// pages, where advising a 2 MiB-aligned range is still correct.
const hugePage = 2 << 20

// adviseHugePages asks the kernel to back the whole 2 MiB pages inside
// slab with transparent huge pages (MADV_HUGEPAGE), which matters where THP
// is set to "madvise", the common default: random lookups in a table of
// hundreds of megabytes otherwise miss the TLB on almost every access. It
// must run before slab is first written, so that the first touch of each
// page already faults in a huge page. Tables smaller than a few huge pages
// are left alone, and a refusal (THP disabled, old kernel) changes nothing
// but speed, so it is ignored.
func adviseHugePages(slab []entry) {
	size := uintptr(len(slab)) * unsafe.Sizeof(entry{})
	if size < 4*hugePage {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(slab)))
	first := (start + hugePage - 1) &^ (hugePage - 1)
	last := (start + size) &^ (hugePage - 1)
	if last <= first {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(slab))), size)
	_ = syscall.Madvise(b[first-start:last-start], syscall.MADV_HUGEPAGE)
}
