package hugepage

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func TestSpan(t *testing.T) {
	const M = 1 << 20
	for _, tt := range []struct{ p, n, lo, hi uintptr }{
		{0, 2 * M, 0, 2 * M},
		{4096, 2 * M, 0, 4 * M},         // crosses into the second page
		{4096, 2*M - 4096, 0, 2 * M},    // ends on a boundary
		{2*M + 8, 6 * M, 2 * M, 10 * M}, // both ends inside pages
		{6 * M, 100, 6 * M, 8 * M},      // small, on a boundary
		{7 * M, 100, 6 * M, 8 * M},      // small, inside a page
		{3 * M, 10 * M, 2 * M, 14 * M},  // several pages
		{2*M - 1, 2, 0, 4 * M},          // two bytes, two pages
	} {
		if lo, hi := span(tt.p, tt.n); lo != tt.lo || hi != tt.hi {
			t.Errorf("span(%#x, %#x) = %#x, %#x; want %#x, %#x", tt.p, tt.n, lo, hi, tt.lo, tt.hi)
		}
	}
}

// TestMake checks that Make's buffer is zero and, on Linux with
// transparent huge pages, that the kernel marked its whole huge pages for
// them (the hg flag of their mapping in /proc/self/smaps).
func TestMake(t *testing.T) {
	s := Make[float32](3 << 20) // 12 MB: whole huge pages inside
	for i, v := range s {
		if v != 0 {
			t.Fatalf("Make: element %d = %v, want 0", i, v)
		}
	}
	if len(Make[uint32](0)) != 0 {
		t.Fatal("Make(0) is not empty")
	}
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); runtime.GOOS != "linux" || err != nil {
		return // no advice to check: advise does nothing there
	}
	lo, hi := span(uintptr(unsafe.Pointer(unsafe.SliceData(s))), uintptr(len(s))*4)
	flags, err := vmFlags(lo)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the mapping of [%#x, %#x) has VmFlags %q: want hg (MADV_HUGEPAGE)", lo, hi, flags)
	}
	runtime.KeepAlive(s)
}

// vmFlags returns the VmFlags of the mapping of this process that holds
// address p, from /proc/self/smaps.
func vmFlags(p uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if from, to, ok := strings.Cut(strings.Fields(line)[0], "-"); ok && !strings.HasSuffix(line, ":") && !strings.Contains(from, ":") {
			a, err1 := strconv.ParseUint(from, 16, 64)
			b, err2 := strconv.ParseUint(to, 16, 64)
			in = err1 == nil && err2 == nil && uintptr(a) <= p && p < uintptr(b)
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no mapping in /proc/self/smaps holds %#x", p)
}

// TestGrow checks that Grow reslices a buffer with room and otherwise
// makes one of exactly n elements.
func TestGrow(t *testing.T) {
	buf := make([]float32, 4, 10)
	for _, tc := range []struct {
		n       int
		reuse   bool
		wantCap int
	}{{0, true, 10}, {7, true, 10}, {10, true, 10}, {11, false, 11}, {1 << 20, false, 1 << 20}} {
		got := Grow(buf, tc.n)
		if len(got) != tc.n || cap(got) != tc.wantCap {
			t.Errorf("Grow(len 4 cap 10, %d): len %d cap %d, want len %d cap %d", tc.n, len(got), cap(got), tc.n, tc.wantCap)
		}
		if same := cap(got) > 0 && unsafe.SliceData(got) == unsafe.SliceData(buf); same != tc.reuse {
			t.Errorf("Grow(len 4 cap 10, %d): reused the buffer %t, want %t", tc.n, same, tc.reuse)
		}
	}
}
