//go:build !purego

package blas

import "golang.org/x/sys/cpu"

const asmNEON = 1

// neonKernel is the arm64 kernel, hand-written in kernel_arm64.s with
// NEON (ASIMD, which every arm64 CPU has). Its 8×12 tile fills the 32
// vector registers: 24 accumulators of 4 floats, the k step's 8 elements
// of A in 2 and 12 of B in 3. Each A element multiplies a B vector by
// FMLA by element, so A needs no broadcasts (the AVX kernels load one per
// row and k step): a k step is 2 loads (5 vectors, 20 floats) for 24
// FMLAs (96 multiply-adds). 12×8 would use the registers alike; 8×12
// makes C's rows 3 vectors long.
//
// The blocking keeps a k step of the strips in L1 and the A block in L2
// on current arm64 cores (L1 64–128 KiB, L2 1 MiB or more): kc = 256
// makes the A and B strips 8 and 12 KiB, mc = 192 the A block 192 KiB;
// nc is the multiple of 12 nearest 4096. The paths that skip packing
// have assembly kernels too (streamNEON: up to 8 rows by 12 columns;
// dotsNEON: 4×4 blocks), with the AVX2 kernel's limits, its tiles being
// as small. None of these choices was measured on arm64 hardware.
var neonKernel = &kernel{name: "neon-8x12", mr: 8, nr: 12, mc: 192, kc: 256, nc: 4092, asm: asmNEON,
	streamMax: 32, srows: 8, sw: 12, dotsMax: 16, drows: 4, narrowN: 256, narrowK: 512, narrowA: 1 << 15}

// asmKernels lists the assembly kernels this CPU runs, fastest first.
func asmKernels() []*kernel {
	if cpu.ARM64.HasASIMD {
		return []*kernel{neonKernel}
	}
	return nil
}

func callAsm(id, k int, a, b, c *float32, ldc int, alpha, beta float32, accum int) {
	if id != asmNEON {
		panic("blas: unknown assembly kernel")
	}
	kernelNEON(k, a, b, c, ldc, alpha, beta, accum)
}

func streamAsm(id int, wide bool, rows, k int, a *float32, ars, aps int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, accum int) {
	if id != asmNEON || wide {
		panic("blas: unknown assembly kernel")
	}
	streamNEON(rows, k, a, ars, aps, b, ldb, c, ldc, alpha, beta, accum)
}

func dotsAsm(id, rows, k int, a *float32, lda int, b *float32, ldb int, out *float32) {
	if id != asmNEON {
		panic("blas: unknown assembly kernel")
	}
	dotsNEON(rows, k, a, lda, b, ldb, out)
}

// kernelNEON computes an 8×12 tile of C from packed strips, as kernel.call.
//
//go:noescape
func kernelNEON(k int, a, b, c *float32, ldc int, alpha, beta float32, accum int)

// streamNEON computes rows ≤ 8 rows of a 12-wide tile of C from A (with
// strides ars, aps) and B (rows ldb apart) where they lie, as kernel.stream;
// k ≥ 1.
//
//go:noescape
func streamNEON(rows int, k int, a *float32, ars int, aps int, b *float32, ldb int, c *float32, ldc int, alpha float32, beta float32, accum int)

// dotsNEON sets out[i·4+j] to the dot product of rows i < rows ≤ 4 of a
// (lda apart) and j < 4 of b (ldb apart), of length k, as kernel.dots.
//
//go:noescape
func dotsNEON(rows int, k int, a *float32, lda int, b *float32, ldb int, out *float32)
