package blas

import (
	"fmt"
	"math"

	"github.com/polysketch/polysketch/internal/parallel"
)

// BF16 is a bfloat16 number: the upper 16 bits of a float32 (sign, the
// 8 exponent bits, 7 bits of mantissa).
type BF16 uint16

// Float32 returns x exactly as a float32.
func (x BF16) Float32() float32 { return math.Float32frombits(uint32(x) << 16) }

// ToBF16 sets dst[i] to src[i] rounded to bfloat16 as VCVTNE2PS2BF16 does:
// to nearest, ties to even; NaNs stay NaN (made quiet); denormals become
// zero of their sign, as the bf16 kernels treat denormal inputs as zero
// anyway. len(dst) must be at least len(src).
func ToBF16(dst []BF16, src []float32) {
	if len(dst) < len(src) {
		panic(fmt.Sprintf("blas: ToBF16: len(dst)=%d < len(src)=%d", len(dst), len(src)))
	}
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = toBF16(f)
	}
}

// toBF16 rounds one float32 to bf16 (see ToBF16).
func toBF16(f float32) BF16 {
	u := math.Float32bits(f)
	switch u & 0x7f800000 {
	case 0: // zero or denormal
		return BF16(u >> 16 & 0x8000)
	case 0x7f800000:
		if u&0x7fffff != 0 {
			return BF16(u>>16 | 0x40) // quiet NaN
		}
		return BF16(u >> 16)
	}
	// Adding 0x7fff plus the lowest kept bit carries into the kept bits
	// exactly when the dropped part is over half, or half with the kept
	// part odd; a carry out of the mantissa bumps the exponent, up to Inf.
	return BF16((u + 0x7fff + u>>16&1) >> 16)
}

// roundGo sets dst[i] to src[i] rounded to bf16, as a float32.
func roundGo(dst, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = toBF16(f).Float32()
	}
}

// pairBF16 returns the bf16 pair (lo, hi) as one 32-bit word, lo in the
// low half: the order VDPBF16PS and TDPBF16PS read pairs of k in.
func pairBF16(lo, hi float32) uint32 {
	return uint32(toBF16(lo)) | uint32(toBF16(hi))<<16
}

// Operand is a matrix operand of a bf16 product: a General, rounded to
// bf16 as it is packed, or (as B only) a *PackedBF16.
type Operand interface {
	bf16Operand()
}

func (General) bf16Operand()     {}
func (*PackedBF16) bf16Operand() {}

// dot2 is one step of the bf16 arithmetic: acc plus the products of the
// pairs a and b, the high halves first, each added with one rounding (to
// nearest even, results below the smallest normal flushed to zero) as
// VDPBF16PS does. Every bf16 kernel but AMX computes an element of C by
// this step alone, over the pairs of k in order, so they agree to the bit.
func dot2(acc float32, a, b uint32) float32 {
	if acc != 0 && math.Abs(float64(acc)) < 0x1p-126 {
		// Denormal: the instruction reads it as zero. The kernels never
		// make one (they flush), but dot2 is the instruction's model.
		acc = float32(math.Copysign(0, float64(acc)))
	}
	acc = fmaBF16(acc, a>>16, b>>16)
	return fmaBF16(acc, a&0xffff, b&0xffff)
}

// fmaBF16 returns acc + x·y for bf16 x and y (in the low 16 bits) rounded
// once to float32, flushing a result below the smallest normal to zero.
//
// The product of two bf16 numbers (8-bit significands) is exact in
// float64, and so is its sum with acc rounded to float64 then float32 as
// if rounded once: both addends have at most 24-bit significands and
// float64 carries 53 ≥ 2·24+1 bits, so the double rounding is innocuous.
// The bf16 inputs are never denormal (ToBF16 makes none), so the
// instruction's reading them as zero needs no code here.
func fmaBF16(acc float32, x, y uint32) float32 {
	p := float64(math.Float32frombits(x<<16)) * float64(math.Float32frombits(y<<16))
	s := p + float64(acc)
	if a := math.Abs(s); a < 0x1p-126 {
		// Flush to zero after rounding as with an unbounded exponent: the
		// largest values below 2⁻¹²⁶ round up to it, ties to it (even).
		if a >= 0x1p-126-0x1p-151 {
			return float32(math.Copysign(0x1p-126, s))
		}
		return float32(math.Copysign(0, s))
	}
	return float32(s)
}

// finish returns the value C takes from the sum acc: alpha·acc, plus
// beta·c unless beta is 0, each product and the sum rounded on its own
// (the explicit conversions forbid fusing) as the assembly does.
func finish(acc, alpha, beta, c float32) float32 {
	t := float32(alpha * acc)
	if beta == 0 {
		return t
	}
	return t + float32(beta*c)
}

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C with op(A)
// (c.Rows×k) and op(B) (k×c.Cols) taken in bf16 (float32 operands
// rounded to nearest even) and every product accumulated in float32, by
// the arithmetic of VDPBF16PS: each element of C sums the pairs of k in
// order (k padded with a zero to even) into one float32, then takes alpha
// and beta once. It uses up to GOMAXPROCS goroutines, splitting C (never
// the k sum), so results do not depend on the thread count. When beta is
// 0, C is not read (NaNs in C are overwritten); when alpha or k is 0, A
// and B are not read. tB must be NoTrans when b is a *PackedBF16 (its
// transpose was applied when packing). Bad shapes panic with a message
// naming them.
func GemmBF16(tA, tB Transpose, alpha float32, a, b Operand, beta float32, c General) {
	g := newGemmBF16("GemmBF16", tA, tB, alpha, a, b, beta, c)
	g.run(parallel.Threads())
}

// GemmBF16Serial is GemmBF16 on the calling goroutine, for callers that
// already run many products in parallel. It does not allocate (its
// buffers are pooled) and gives the same bits as GemmBF16.
func GemmBF16Serial(tA, tB Transpose, alpha float32, a, b Operand, beta float32, c General) {
	g := newGemmBF16("GemmBF16Serial", tA, tB, alpha, a, b, beta, c)
	g.run(1)
}

// rowBlockBF16 is RowBlockBF16 for every n.
const rowBlockBF16 = 32

// RowBlockBF16 is RowBlock for GemmBF16: the most rows of C (n columns
// wide) that are computed each by the same arithmetic as the row alone.
// A server batching single tokens of different requests multiplies at
// most this many rows at a time, so that a request's bits do not depend
// on its neighbours. The kernels with bf16 instructions compute any
// number of rows alike (the AMX kernel adds in the tiles' order for every
// product, of one row too), so for them the bound only keeps a step's
// groups small; the sgemm kernel's is Sgemm's, RowBlock(n).
func RowBlockBF16(n int) int {
	if activeBF16.sgemm {
		return RowBlock(n)
	}
	return rowBlockBF16
}

// KernelBF16 names the bf16 kernel in use: "amx", "avx512fma",
// "avx512bf16", "sgemm" or "go" (see KernelBF16For for the code each
// shape runs).
func KernelBF16() string { return activeBF16.name }

// FasterBF16 reports whether the bf16 kernel in use multiplies faster
// than float32 products: AMX tiles, or VDPBF16PS on AMD cores. The others
// take bf16 for its rounding, not its speed (sgemm rounds the operands
// and multiplies in float32), so callers with products that may be
// float32 or bf16 for speed alone keep them float32 there.
func FasterBF16() bool {
	asm, fast := asmBF16Kernels()
	for _, k := range asm[:fast] {
		if k == activeBF16 {
			return true
		}
	}
	return false
}

// KernelBF16For names the code that computes a bf16 product of m rows, n
// columns and inner dimension k with the kernel in use: "amx" (AMX
// tiles), "avx512fma" (float32 FMAs on the pairs' halves), "avx512bf16"
// (VDPBF16PS), "sgemm" (Sgemm on operands rounded to bf16) or "go". The
// choice depends on the shape and the CPU only, never on timings, so that
// results are reproducible.
func KernelBF16For(m, n, k int) string { return activeBF16.codeFor(m) }
