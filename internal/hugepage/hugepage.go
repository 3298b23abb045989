// Package hugepage asks the operating system to back large buffers with
// transparent huge pages.
//
// A training step walks gigabytes of activations, parameters and
// workspaces. On 4 KB pages every 4 KB of it costs a TLB entry, and under
// a hypervisor a TLB miss walks two page tables; the first touch of each
// page also faults. Linux backs memory with 2 MB pages where a program
// asks for them (madvise(MADV_HUGEPAGE)) under its usual setting
// (/sys/kernel/mm/transparent_hugepage/enabled = madvise), and the Go
// runtime asks for none (see go.dev/doc/gc-guide). So the buffers that are
// large, dense and long-lived ask here, when they are made.
package hugepage

import "unsafe"

// size is the huge page of amd64 and arm64 Linux with 4 KB base pages.
const size = 2 << 20

// minBytes is the smallest buffer advised: past 32 KB the Go heap gives an
// object pages of its own.
const minBytes = 64 << 10

// Make returns make([]T, n); if that takes minBytes or more, the huge
// pages it touches are advised for huge pages as soon as it is made.
// Memory fresh from the system is not touched before, so it faults in
// huge pages (memory the Go heap reuses may be collapsed into them later,
// by the kernel's khugepaged). The advice covers the buffer's first and
// last huge pages whole, with whatever else of the heap lies there, and
// buffers under a huge page too: a model's parameters and gradients are
// many buffers of a megabyte or less. Measured on a 2-core Xeon (KVM),
// one thread, the default model: advising only the whole huge pages
// within buffers of 2 MB or more left 270 MB on small pages and the step
// as slow as without advice; advising as here made it as fast as
// transparent huge pages for all memory (enabled = always), 5–18% faster
// than no advice in bf16, with the same peak resident memory and 1/70 of
// the page faults. Advice that the system does not take (no transparent
// huge pages, another OS) changes nothing.
func Make[T any](n int) []T {
	s := make([]T, n)
	var zero T
	if bytes := uintptr(n) * unsafe.Sizeof(zero); bytes >= minBytes {
		advise(span(uintptr(unsafe.Pointer(unsafe.SliceData(s))), bytes))
	}
	return s
}

// Grow returns buf resliced to length n, or, when its capacity is too
// small, a new buffer of exactly n elements from Make (buf's contents are
// not copied): the workspaces that hot loops reuse.
func Grow[T any](buf []T, n int) []T {
	if cap(buf) >= n {
		return buf[:n]
	}
	return Make[T](n)
}

// span returns the huge pages [lo, hi) that the n bytes at p touch.
func span(p, n uintptr) (lo, hi uintptr) {
	return p &^ (size - 1), (p + n + size - 1) &^ (size - 1)
}
