package hugepage

import "syscall"

// advise marks [lo, hi) for huge pages. It is advice: an error (a kernel
// without transparent huge pages) leaves the pages as they were.
func advise(lo, hi uintptr) {
	syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, syscall.MADV_HUGEPAGE)
}
