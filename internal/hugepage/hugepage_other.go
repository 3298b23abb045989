//go:build !linux

package hugepage

// advise does nothing: only Linux takes the advice.
func advise(lo, hi uintptr) {}
