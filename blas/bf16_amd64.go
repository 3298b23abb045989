//go:build !purego

package blas

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"sync"

	"golang.org/x/sys/cpu"
)

// avx512BF16 computes with VDPBF16PS: 14×32 tiles (28 accumulators of 16
// lanes), and for one or two rows 128-column tiles that read four strips
// of B at once. Its arithmetic is dot2's, so it matches the portable
// kernel to the bit.
var avx512BF16 = &bf16Kernel{name: "avx512bf16", tileCode: "avx512bf16", wideCode: "avx512bf16", mr: 14, mc: 168, tile: tileBF16, wide: wideBF16, wideRows: 2,
	cvt: cvtBF16, inter: interBF16, pairRows: pairRowsBF16}

// avx512FMA is avx512BF16 with the tiles' products taken by float32 FMAs
// (two per pair, on the halves of the pairs as float32, with MXCSR set
// to flush as VDPBF16PS does): the same bits, on the two FMA ports of
// Intel cores, where VDPBF16PS has one. Decoding keeps VDPBF16PS's wide
// tiles, which read B no slower.
var avx512FMA = &bf16Kernel{name: "avx512fma", tileCode: "avx512fma", wideCode: "avx512bf16", mr: 13, mc: 156, tile: tileFMA, wide: wideBF16, wideRows: 2,
	cvt: cvtBF16, inter: interBF16, pairRows: pairRowsBF16, expand: expandPairs}

// amxBF16Kernel computes every product in TDPBF16PS's order of addition,
// whatever its rows, so that a row's bits never depend on the rows beside
// it: on AMX tiles (bf16_amx.go; decoding's few rows on the 16-row
// kernel, amxBF16Half), or for one row by a packed B on float32 FMAs that
// add in the tiles' order (amxWide, amxTile). B is packed as for
// avx512FMA.
var amxBF16Kernel = &bf16Kernel{name: "amx", tileCode: "amx", wideCode: "amx", mr: 1, mc: 1, tile: amxTile, wide: amxWide, wideRows: 1,
	cvt: cvtBF16, inter: interBF16, pairRows: pairRowsBF16,
	tiles: tilesAMX, packTiles: packTilesAMX}

// asmBF16Kernels lists the bf16 assembly kernels this CPU runs, fastest
// first, by what was measured (docs/bf16.md), and how many of the first
// multiply faster than float32 products (bf16Kernels puts sgemm after
// them): AMX tiles where the CPU has them (Intel); otherwise, on AMD
// cores, whose VDPBF16PS multiplies twice as fast as their float32 FMAs,
// avx512bf16; on Intel cores, where it has one port to the FMAs' two,
// avx512fma, which does as many FMAs as float32 and expands A's pairs
// besides. All but the tiles give the same bits, so the order changes
// speed only.
func asmBF16Kernels() (ks []*bf16Kernel, fast int) {
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512BW || !cpu.X86.HasAVX512BF16 {
		return nil, 0
	}
	ks = []*bf16Kernel{avx512FMA, avx512BF16}
	if isAMD() {
		ks, fast = []*bf16Kernel{avx512BF16, avx512FMA}, 1
	}
	if cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 && amxPermitted() {
		ks, fast = append([]*bf16Kernel{amxBF16Kernel}, ks...), fast+1
	}
	return ks, fast
}

// isAMD reports whether the CPU's vendor is AMD ("AuthenticAMD", or
// Hygon's licensed Zen, "HygonGenuine").
func isAMD() bool {
	v := vendor()
	return v == "AuthenticAMD" || v == "HygonGenuine"
}

// vendor returns the CPU vendor's name as CPUID spells it
// ("GenuineIntel", "AuthenticAMD", …).
func vendor() string {
	b, c, d := cpuVendor()
	var v [12]byte
	binary.LittleEndian.PutUint32(v[0:], b)
	binary.LittleEndian.PutUint32(v[4:], d)
	binary.LittleEndian.PutUint32(v[8:], c)
	return string(v[:])
}

var (
	amxOnce sync.Once
	amxErr  error
)

// amxPermitted asks the OS, once, for the right to use the AMX tile data
// (Linux hands it out per process on request), and says on stderr, once,
// when it was refused.
func amxPermitted() bool {
	amxOnce.Do(func() {
		amxErr = requestAMX()
		if amxErr != nil {
			fmt.Fprintf(os.Stderr, "blas: this CPU has AMX but the OS refused the tiles (%v): bf16 products use avx512bf16\n", amxErr)
		}
	})
	return amxErr == nil
}

// amxConfig is the tile configuration of amxBF16 and tdpbf16psLoop:
// palette 1, tiles 0–7 each 16 rows of 64 bytes.
var amxConfig = func() (c [64]byte) {
	c[0] = 1
	for t := 0; t < 8; t++ {
		binary.LittleEndian.PutUint16(c[16+2*t:], 64)
		c[48+t] = 16
	}
	return c
}()

func tilesAMX(a, b []uint32, bs, nstrips, chunks int, acc []float32, mode int, c []float32, ldc, rows int, alpha, beta float32, mask uint32, tmp []float32, cv *amxConvert) {
	_ = a[chunks*chunkWords-1]
	_ = b[(nstrips-1)*bs+chunks*chunkWords-1]
	_ = tmp[amxBlock*nrBF16-1]
	var accp *float32
	if mode&(amxLoad|amxStore) != 0 {
		_ = acc[nstrips*amxBlock*nrBF16-1]
		accp = &acc[0]
	}
	if mode&amxStore == 0 {
		// With amxDirect (rows 32) whole strips are stored, the last one
		// under the mask through tmp.
		if mode&amxDirect != 0 && rows != amxBlock {
			panic("blas: tilesAMX: amxDirect with fewer than 32 rows")
		}
		_ = c[(rows-1)*ldc+(nstrips-1)*nrBF16+bits.OnesCount32(mask)-1]
	}
	if rows <= amxBlock/2 {
		if cv.state[0] != 0 {
			panic("blas: tilesAMX: a block of at most 16 rows converts no next block")
		}
		amxBF16Half(&amxConfig[0], &a[0], &b[0], 4*bs, nstrips, chunks, accp, mode&^amxDirect, &c[0], ldc, rows, alpha, beta, mask, &tmp[0], &cv.state)
		return
	}
	amxBF16(&amxConfig[0], &a[0], &b[0], 4*bs, nstrips, chunks, accp, mode, &c[0], ldc, rows, alpha, beta, mask, &tmp[0], &cv.state)
}

// packTilesAMX is packTilesGo with assembly for the chunks wholly within
// k, of any rows of A as stored and of 32 rows of Aᵀ.
func packTilesAMX(t Transpose, a General, k, i0, rows, c0, c1 int, dst []uint32) {
	dst = dst[:(c1-c0)*chunkWords]
	n := max(0, min(c1, k/32)-c0) // chunks wholly within k
	switch {
	case n == 0:
	case t == NoTrans:
		_ = a.Data[(i0+rows-1)*a.Stride+32*(c0+n)-1]
		src := a.Data[i0*a.Stride+32*c0:]
		amxPackRows(&dst[0], &src[0], a.Stride, min(rows, 16), n)
		if rows > 16 {
			amxPackRows(&dst[16], &src[16*a.Stride], a.Stride, rows-16, n)
		}
		for c := 0; c < n && rows < amxBlock; c++ {
			for i := rows; i < amxBlock; i++ {
				clear(dst[c*chunkWords+tileRow(i) : c*chunkWords+tileRow(i)+16])
			}
		}
	case rows == amxBlock:
		_ = a.Data[(32*(c0+n)-1)*a.Stride+i0+amxBlock-1]
		amxPackCols(&dst[0], &a.Data[32*c0*a.Stride+i0], a.Stride, n)
	default:
		n = 0
	}
	if c0+n < c1 {
		packTilesGo(t, a, k, i0, rows, c0+n, c1, dst[n*chunkWords:])
	}
}

func accumFlag(beta float32) int {
	if beta != 0 {
		return 1
	}
	return 0
}

func tileBF16(rows, cols, kp int, a []uint32, ars, aps int, b []uint32, c []float32, ldc int, alpha, beta float32) {
	_ = a[(rows-1)*ars+(kp-1)*aps]
	_ = b[kp*nrBF16-1]
	_ = c[(rows-1)*ldc+cols-1]
	tileBF16AVX512(rows, kp, &a[0], ars, aps, &b[0], 0, &c[0], ldc, alpha, beta, accumFlag(beta), colMask(cols))
}

func wideBF16(rows, kp int, a []uint32, ars, aps int, b []uint32, bs int, c []float32, ldc int, alpha, beta float32) {
	_ = a[(rows-1)*ars+(kp-1)*aps]
	_ = b[3*bs+kp*nrBF16-1]
	_ = c[(rows-1)*ldc+4*nrBF16-1]
	wideBF16AVX512(rows, kp, &a[0], ars, aps, &b[0], bs, &c[0], ldc, alpha, beta, accumFlag(beta), colMask(32))
}

// amxWide is wideBF16 for one row in TDPBF16PS's order of addition (the
// bits the tiles give the row), on float32 FMAs: decoding one sequence,
// bound by reading B, at the speed of vector loads.
func amxWide(rows, kp int, a []uint32, ars, aps int, b []uint32, bs int, c []float32, ldc int, alpha, beta float32) {
	if rows != 1 {
		panic("blas: amxWide: more than one row")
	}
	_ = a[(kp-1)*aps]
	_ = b[3*bs+kp*nrBF16-1]
	_ = c[4*nrBF16-1]
	amxWideAVX512(1, kp, &a[0], ars, aps, &b[0], bs, &c[0], ldc, alpha, beta, accumFlag(beta), colMask(32))
}

// amxTile is amxWide for one strip, its columns under a mask: the
// strips of a decoding row that do not fill a group of four.
func amxTile(rows, cols, kp int, a []uint32, ars, aps int, b []uint32, c []float32, ldc int, alpha, beta float32) {
	if rows != 1 {
		panic("blas: amxTile: more than one row")
	}
	_ = a[(kp-1)*aps]
	_ = b[kp*nrBF16-1]
	_ = c[cols-1]
	amxTileAVX512(1, kp, &a[0], ars, aps, &b[0], 0, &c[0], ldc, alpha, beta, accumFlag(beta), colMask(cols))
}

// tileFMA is tileBF16 with float32 FMAs, A's pairs expanded
// (expandPairs): the pair p of row i at 2·(i·ars + p·aps) in words, with
// ars and aps doubled by the caller.
func tileFMA(rows, cols, kp int, a []uint32, ars, aps int, b []uint32, c []float32, ldc int, alpha, beta float32) {
	_ = a[(rows-1)*ars+(kp-1)*aps+1]
	_ = b[kp*nrBF16-1]
	_ = c[(rows-1)*ldc+cols-1]
	tileFMAAVX512(rows, kp, &a[0], ars, aps, &b[0], 0, &c[0], ldc, alpha, beta, accumFlag(beta), colMask(cols))
}

// expandPairs sets dst[2i], dst[2i+1] to the float32 bits of the high
// and the low half of src[i].
func expandPairs(dst, src []uint32) {
	n := len(src) / 16
	if n > 0 {
		_ = dst[32*n-1]
		expandPairsAVX512(&dst[0], &src[0], n)
	}
	expandGo(dst[32*n:], src[16*n:])
}

func cvtBF16(dst []uint32, src []float32) {
	n := len(src) / 32
	if n > 0 {
		_ = dst[16*n-1]
		cvtBF16AVX512(&dst[0], &src[0], n)
	}
	cvtGo(dst[16*n:], src[32*n:])
}

// roundBF16s sets dst[i] to src[i] rounded to bf16 (toBF16), as a
// float32; dst may be src.
func roundBF16s(dst, src []float32) { roundBlocks(roundAsm, dst, src) }

// roundAsm is the fastest rounding of blocks of 16 floats this CPU runs,
// or nil.
var roundAsm = func() func(dst, src *float32, blocks int) {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16:
		return roundBF16CVT
	case cpu.X86.HasAVX512F:
		return roundBF16AVX512
	case cpu.X86.HasAVX2:
		return roundBF16AVX2
	}
	return nil
}()

// roundBlocks is roundBF16s by asm on the whole blocks of 16 and roundGo
// on the rest.
func roundBlocks(asm func(dst, src *float32, blocks int), dst, src []float32) {
	n := 0
	if asm != nil {
		n = len(src) / 16
		if n > 0 {
			_ = dst[16*n-1]
			asm(&dst[0], &src[0], n)
		}
	}
	roundGo(dst[16*n:], src[16*n:])
}

func pairRowsBF16(dst []uint32, b []float32, ldb, pairs, strips, stride int) {
	_ = dst[(pairs-1)*nrBF16+(strips-1)*stride+nrBF16-1]
	_ = b[(2*pairs-1)*ldb+nrBF16*strips-1]
	pairRowsAVX512(&dst[0], &b[0], ldb, pairs, strips, stride)
}

func interBF16(dst []uint32, r0, r1 []float32) {
	r1 = r1[:len(r0)]
	n := len(r0) / 16
	if n > 0 {
		_ = dst[16*n-1]
		interleaveBF16AVX512(&dst[0], &r0[0], &r1[0], n)
	}
	interGo(dst[16*n:len(r0)], r0[16*n:], r1[16*n:])
}
