package blas

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
)

// amxEmulated models amxBF16 in Go, TDPBF16PS as Intel's pseudocode
// describes it: within each instruction (16 pairs of k), the even and
// the odd products of an element are summed apart from zero, each
// product added with one rounding (fmaBF16), then the two sums are added
// together and their sum to the accumulator, each addition rounded once
// and flushed below 2⁻¹²⁶. TestTDPBF16PS checks it against the
// instruction where the CPU has AMX; on CPUs without AMX it lets the
// tile driver (packing, blocking, strides, masks) be tested with the
// instruction's bits.
func amxEmulated(a, b []uint32, bs, nstrips, chunks int, acc []float32, mode int, c []float32, ldc, rows int, alpha, beta float32, mask uint32, tmp []float32, cv *amxConvert) {
	if cv != nil && cv.state[0] != 0 {
		if cv.pairs {
			b := cv.a
			for p := 0; p < b.Rows/2; p++ {
				for s := 0; s < b.Cols/nrBF16; s++ {
					r0, r1 := b.Data[2*p*b.Stride+s*nrBF16:], b.Data[(2*p+1)*b.Stride+s*nrBF16:]
					interGo(cv.dst[p*nrBF16+s*cv.stride:], r0[:nrBF16], r1)
				}
			}
		} else {
			packTilesGo(NoTrans, cv.a, 32*cv.c1, cv.i0, amxBlock, cv.c0, cv.c1, cv.dst)
		}
		cv.state[0] = 0
	}
	for t := 0; t < nstrips; t++ {
		strip := b[t*bs:]
		for i := 0; i < amxBlock; i++ {
			for j := 0; j < nrBF16; j++ {
				var sum float32
				if mode&amxLoad != 0 {
					sum = acc[t*1024+i*nrBF16+j]
				}
				for ch := 0; ch < chunks; ch++ {
					var even, odd float32
					for p := 0; p < 16; p++ {
						x, y := a[ch*chunkWords+tileRow(i)+p], strip[ch*chunkWords+p*nrBF16+j]
						even = fmaBF16(even, x&0xffff, y&0xffff)
						odd = fmaBF16(odd, x>>16, y>>16)
					}
					sum = flush(sum + flush(even+odd))
				}
				tmp[i*nrBF16+j] = sum
			}
		}
		if mode&amxStore != 0 {
			// Of a block of at most 16 rows only the first 16 rows of
			// sums are stored (amxBF16Half).
			n := 1024
			if rows <= amxBlock/2 {
				n = 512
			}
			copy(acc[t*1024:t*1024+n], tmp)
			continue
		}
		cols := nrBF16
		if t == nstrips-1 {
			cols = bits.Len32(mask)
		}
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				cc := &c[i*ldc+t*nrBF16+j]
				*cc = finish(tmp[i*nrBF16+j], alpha, beta, *cc)
			}
		}
	}
}

// flush returns x, or zero of its sign when x is below the smallest
// normal.
func flush(x float32) float32 {
	if math.Abs(float64(x)) < 0x1p-126 {
		return float32(math.Copysign(0, float64(x)))
	}
	return x
}

// emulatedTiles returns the portable kernel with emulated AMX tiles.
func emulatedTiles() *bf16Kernel {
	emu := *goBF16
	emu.name, emu.tiles = "go+emulated-tiles", amxEmulated
	return &emu
}

// tileKernels returns the kernels with tiles this CPU runs, and the
// portable kernel with emulated tiles.
func tileKernels() []*bf16Kernel {
	ks := []*bf16Kernel{emulatedTiles()}
	for _, kn := range bf16Kernels() {
		if kn.tiles != nil {
			ks = append(ks, kn)
		}
	}
	return ks
}

// TestGemmBF16Tiles checks the tile path (products of more than
// RowBlockBF16 rows) against the float64 reference, on the AMX kernel
// where the CPU has it and always on emulated tiles: ragged rows around
// the 32-row blocks, columns around the strips, k around the 32-element
// chunks, both transposes, strides, alpha and beta, NaNs in C at beta 0,
// B packed; and that results do not depend on GOMAXPROCS nor on how
// tileItem orders the work: with budgets (amxLimits) small enough that
// k is split into blocks, strips into groups and row blocks into groups,
// in both orders, each product has the bits it has in one piece, also
// where the kernel converts the next row block of A (97×256×256).
func TestGemmBF16Tiles(t *testing.T) {
	ks := tileKernels()
	if len(ks) == 1 {
		t.Log("this CPU has no AMX (amx_bf16): the AMX kernel was not run, only the tile driver on emulated tiles")
	}
	defer func(k *bf16Kernel) { activeBF16 = k }(activeBF16)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer func(l struct{ chunks, panelBytes, accBytes, aBytes int }) { amxLimits = l }(amxLimits)
	limits := []struct{ chunks, panelBytes, accBytes, aBytes int }{
		amxLimits,
		{1, 1 << 20, 1 << 20, 1 << 20},   // k blocks of one chunk, one group
		{2, 64 << 10, 4 << 10, 1 << 20},  // strip groups: rows first; B converted by the tiles, A whole first
		{2, 64 << 10, 4 << 10, 0},        // the same, A converted for each strip group
		{1, 2 << 10, 12 << 10, 1 << 20},  // row groups: k blocks first
		{3, 1 << 20, 8 << 10, 1 << 20},   // k blocks first, ragged k blocks
		{2, 16 << 10, 64 << 10, 1 << 20}, // k blocks first, row groups of 2 (97×256×256: the tiles convert A's next block)
	}
	rng := rand.New(rand.NewPCG(75, 76))
	shapes := [][3]int{{33, 17, 5}, {64, 32, 32}, {64, 48, 70}, {70, 65, 33}, {97, 40, 64}, {40, 100, 31}, {97, 160, 200}, {97, 256, 256}}
	for _, kn := range ks {
		activeBF16 = kn
		t.Run(kn.name, func(t *testing.T) {
			for _, sh := range shapes {
				for _, tr := range transposes {
					for _, ab := range [][2]float32{{1, 0}, {-0.5, 1.5}} {
						p := newProblem(rng, tr[0], tr[1], sh[0], sh[1], sh[2], ab[0], ab[1], 2)
						a, b, c := p.views()
						var first []float32
						for li, l := range limits {
							amxLimits = l
							procs := parallel.TestThreads
							if li > 0 {
								procs = []int{1, 3} // items of row and strip parts too
							}
							for _, procs := range procs {
								runtime.GOMAXPROCS(procs)
								got := append([]float32(nil), c.Data...)
								GemmBF16(p.tA, p.tB, p.alpha, a, b, p.beta, General{c.Rows, c.Cols, c.Stride, got})
								if first == nil {
									p.checkBF16(t, got)
									first = got
								} else {
									sameBits(t, fmt.Sprintf("%v limits %v GOMAXPROCS=%d", p, l, procs), got, first)
								}
							}
							if li == 0 {
								got := append([]float32(nil), c.Data...)
								GemmBF16(p.tA, NoTrans, p.alpha, a, PackBF16(p.tB, b), p.beta, General{c.Rows, c.Cols, c.Stride, got})
								sameBits(t, fmt.Sprintf("%v packed B", p), got, first)
							}
						}
						amxLimits = limits[0]
					}
				}
			}
		})
	}
}
