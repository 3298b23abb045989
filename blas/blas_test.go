package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/polysketch/polysketch/internal/parallel"
)

// naive is the reference: a triple loop accumulating in float64. It reads
// C only when beta ≠ 0 and A, B only when alpha ≠ 0, as BLAS does.
func naive(tA, tB Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			if alpha != 0 {
				for p := 0; p < k; p++ {
					x, y := at(tA, a, lda, i, p), at(tB, b, ldb, p, j)
					s += float64(x) * float64(y)
				}
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(v)
		}
	}
}

// at returns element [r, c] of op(X) for X stored row-major with ld.
func at(t Transpose, x []float32, ld, r, c int) float32 {
	if t == Trans {
		return x[c*ld+r]
	}
	return x[r*ld+c]
}

// bound returns, for each element of C, the error float32 arithmetic may
// make: a few ulps per term of the k sum, scaled by the sum of the terms'
// magnitudes.
func bound(tA, tB Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	e := make([]float64, m*n)
	const eps = 1.0 / (1 << 23)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				x, y := at(tA, a, lda, i, p), at(tB, b, ldb, p, j)
				s += math.Abs(float64(x) * float64(y))
			}
			mag := math.Abs(float64(alpha)) * s
			if beta != 0 {
				mag += math.Abs(float64(beta) * float64(c[i*ldc+j]))
			}
			e[i*n+j] = 2*float64(k+2)*eps*mag + 1e-30
		}
	}
	return e
}

// problem is one Sgemm call with its operands.
type problem struct {
	tA, tB        Transpose
	m, n, k       int
	alpha, beta   float32
	lda, ldb, ldc int
	a, b, c       []float32
}

// newProblem makes random operands; pad > 0 makes every leading dimension
// that much larger than its matrix is wide, so the operands are strided
// views. C's padding holds a sentinel that no call may change.
func newProblem(rng *rand.Rand, tA, tB Transpose, m, n, k int, alpha, beta float32, pad int) *problem {
	p := &problem{tA: tA, tB: tB, m: m, n: n, k: k, alpha: alpha, beta: beta}
	ar, ac := stored(tA, m, k)
	br, bc := stored(tB, k, n)
	p.lda, p.ldb, p.ldc = max(1, ac)+pad, max(1, bc)+pad, max(1, n)+pad
	fill := func(rows, ld int) []float32 {
		s := make([]float32, rows*ld)
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
		return s
	}
	p.a, p.b, p.c = fill(ar, p.lda), fill(br, p.ldb), fill(m, p.ldc)
	for i := 0; i < m; i++ {
		for j := n; j < p.ldc; j++ {
			p.c[i*p.ldc+j] = sentinel
		}
	}
	if beta == 0 {
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				p.c[i*p.ldc+j] = float32(math.NaN()) // must be overwritten
			}
		}
	}
	return p
}

const sentinel = 12345.0

type sgemmFunc func(tA, tB Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// loose adapts a product on views to the (slice, leading dimension) form
// of the reference and of these tests.
func loose(f func(tA, tB Transpose, alpha float32, a, b General, beta float32, c General)) sgemmFunc {
	return func(tA, tB Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
		ar, ac := stored(tA, m, k)
		br, bc := stored(tB, k, n)
		f(tA, tB, alpha, General{ar, ac, lda, a}, General{br, bc, ldb, b}, beta, General{m, n, ldc, c})
	}
}

var sgemm, sgemmSerial = loose(Sgemm), loose(SgemmSerial)

// check runs f on a copy of p and compares it with the reference.
func (p *problem) check(t *testing.T, name string, f sgemmFunc) {
	t.Helper()
	got := append([]float32(nil), p.c...)
	want := append([]float32(nil), p.c...)
	f(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, got, p.ldc)
	naive(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, want, p.ldc)
	tol := bound(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, p.c, p.ldc)
	bad := 0
	for i := 0; i < p.m; i++ {
		for j := 0; j < p.ldc; j++ {
			g, w := got[i*p.ldc+j], want[i*p.ldc+j]
			if j >= p.n {
				if g != sentinel {
					t.Errorf("%s %v: C[%d,%d] outside the view changed to %v", name, p, i, j, g)
					bad++
				}
			} else if d := math.Abs(float64(g) - float64(w)); !(d <= tol[i*p.n+j]) {
				t.Errorf("%s %v: C[%d,%d] = %v, want %v (tolerance %.3g)", name, p, i, j, g, w, tol[i*p.n+j])
				bad++
			}
			if bad > 5 {
				t.FailNow()
			}
		}
	}
}

func (p *problem) String() string {
	return fmt.Sprintf("%c%c m=%d n=%d k=%d alpha=%v beta=%v lda=%d ldb=%d ldc=%d", p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.beta, p.lda, p.ldb, p.ldc)
}

// tiny returns a copy of kn with the smallest blocking it allows, so that
// small tests cross every block edge.
func tiny(kn *kernel) *kernel {
	t := *kn
	t.name += "-tiny"
	t.mc, t.kc, t.nc = 2*kn.mr, 5, 2*kn.nr
	t.narrowN = 0
	return &t
}

// packedNarrow returns kn packing the narrow products that it would
// compute with the stream kernel (streamTall), so that the tests check the
// packed path on those shapes too.
func packedNarrow(kn *kernel) *kernel {
	t := *kn
	t.name += "-packed"
	t.narrowN = 0
	return &t
}

// eachKernel runs f with every kernel this CPU has active in turn, each
// also packing narrow products and with tiny blocking (which packs them
// too).
func eachKernel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func(k *kernel) { active = k }(active)
	for _, kn := range kernels() {
		for _, k := range []*kernel{kn, packedNarrow(kn), tiny(kn)} {
			active = k
			t.Run(k.name, f)
		}
	}
}

var transposes = [][2]Transpose{{NoTrans, NoTrans}, {NoTrans, Trans}, {Trans, NoTrans}, {Trans, Trans}}

func TestSgemm(t *testing.T) {
	sizes := [][3]int{ // m, n, k
		{1, 1, 1}, {1, 1, 0}, {0, 3, 2}, {3, 0, 2}, {0, 0, 0},
		{2, 3, 4}, {5, 7, 3}, {13, 17, 11}, {15, 33, 9}, {29, 31, 37},
		{64, 64, 64}, {6, 16, 1}, {14, 32, 5}, {7, 65, 260}, {45, 3, 70},
	}
	if !testing.Short() {
		sizes = append(sizes, [3]int{200, 150, 300}, [3]int{3, 4100, 5})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	scalars := [][2]float32{{1, 0}, {1, 1}, {-0.5, 0}, {2, -1.5}, {0, 0.5}, {0, 0}}
	eachKernel(t, func(t *testing.T) {
		for _, s := range sizes {
			for _, tr := range transposes {
				for _, ab := range scalars {
					for _, pad := range []int{0, 3} {
						p := newProblem(rng, tr[0], tr[1], s[0], s[1], s[2], ab[0], ab[1], pad)
						p.check(t, "Sgemm", sgemm)
						p.check(t, "SgemmSerial", sgemmSerial)
					}
				}
			}
		}
	})
}

// TestSgemmLarge crosses the real block sizes (several kc and mc blocks)
// and runs the parallel split.
func TestSgemmLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	eachKernel(t, func(t *testing.T) {
		for _, tr := range transposes {
			m, n, k := 301, 97, 530
			if testing.Short() {
				m, n, k = 181, 45, 270
			}
			p := newProblem(rng, tr[0], tr[1], m, n, k, 0.75, 0.5, 2)
			p.check(t, "Sgemm", sgemm)
		}
	})
}

func TestNaNInA(t *testing.T) {
	// alpha = 0 must not read A: a NaN there must not reach C.
	a := []float32{float32(math.NaN())}
	b := []float32{1}
	c := []float32{2}
	sgemm(NoTrans, NoTrans, 1, 1, 1, 0, a, 1, b, 1, 3, c, 1)
	if c[0] != 6 {
		t.Errorf("alpha=0: C = %v, want 6", c[0])
	}
	// But otherwise NaN propagates, as in the reference.
	sgemm(NoTrans, NoTrans, 1, 1, 1, 1, a, 1, b, 1, 0, c, 1)
	if !math.IsNaN(float64(c[0])) {
		t.Errorf("NaN in A: C = %v, want NaN", c[0])
	}
}

// TestDeterminism checks that the thread count does not change a bit of
// the result, and that SgemmSerial agrees with Sgemm, on shapes that the
// parallel path splits by rows only, by rows and columns (A packed once,
// shared), over several panels of B, and on the unpacked paths for few
// rows (decoding) and few columns.
func TestDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	eachKernel(t, func(t *testing.T) {
		for _, tr := range transposes {
			for _, s := range [][3]int{{157, 203, 300}, {1200, 70, 90}, {40, 1200, 300}, {60, 4300, 40}, {70, 4500, 260}, {1, 2048, 300}, {2, 700, 1000}, {500, 8, 600}} {
				p := newProblem(rng, tr[0], tr[1], s[0], s[1], s[2], 1.5, 0.25, 1)
				want := append([]float32(nil), p.c...)
				sgemmSerial(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, want, p.ldc)
				for _, procs := range parallel.TestThreads {
					runtime.GOMAXPROCS(procs)
					c := append([]float32(nil), p.c...)
					sgemm(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
					for i := range c {
						if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v: GOMAXPROCS=%d differs from SgemmSerial at %d: %v vs %v", p, procs, i, c[i], want[i])
						}
					}
				}
			}
		}
	})
}

func TestSgemmSerialAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	eachKernel(t, func(t *testing.T) {
		for _, tr := range transposes {
			p := newProblem(rng, tr[0], tr[1], 67, 131, 64, 1, 1, 0)
			n := testing.AllocsPerRun(20, func() {
				sgemmSerial(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, p.c, p.ldc)
			})
			if n != 0 {
				t.Errorf("%v: %v allocations per call, want 0", p, n)
			}
		}
	})
}

func TestSgemmBatched(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	eachKernel(t, func(t *testing.T) {
		for _, batch := range []int{0, 1, 3, 8} {
			for _, tr := range transposes {
				m, n, k := 19, 35, 23
				ps := make([]*problem, batch)
				var a, b, c []float32
				for i := range ps {
					ps[i] = newProblem(rng, tr[0], tr[1], m, n, k, 0.5, 2, 1)
					a, b, c = append(a, ps[i].a...), append(b, ps[i].b...), append(c, ps[i].c...)
				}
				if batch == 0 {
					ar, ac := stored(tr[0], m, k)
					br, bc := stored(tr[1], k, n)
					SgemmBatched(tr[0], tr[1], 0, 1, Strided{General{ar, ac, 64, nil}, 0}, Strided{General{br, bc, 64, nil}, 0}, 0, Strided{General{m, n, 64, nil}, 0})
					continue
				}
				p := ps[0]
				sa, sb, sc := len(p.a), len(p.b), len(p.c)
				for _, procs := range parallel.TestThreads {
					runtime.GOMAXPROCS(procs)
					got := append([]float32(nil), c...)
					ar, ac := stored(p.tA, m, k)
					br, bc := stored(p.tB, k, n)
					SgemmBatched(p.tA, p.tB, batch, p.alpha, Strided{General{ar, ac, p.lda, a}, sa}, Strided{General{br, bc, p.ldb, b}, sb}, p.beta, Strided{General{m, n, p.ldc, got}, sc})
					for i, q := range ps {
						want := append([]float32(nil), q.c...)
						sgemm(q.tA, q.tB, m, n, k, q.alpha, q.a, q.lda, q.b, q.ldb, q.beta, want, q.ldc)
						for j, w := range want {
							if g := got[i*sc+j]; math.Float32bits(g) != math.Float32bits(w) {
								t.Fatalf("batch %d of %d, %v: C[%d] = %v, Sgemm gives %v", i, batch, q, j, g, w)
							}
						}
					}
				}
			}
		}
	})
	// Stride 0 shares one B (a weight) across the batch.
	a := []float32{1, 2, 3, 4}             // two 1×2 matrices
	b := []float32{10, 20}                 // one 2×1 matrix
	c := []float32{float32(math.NaN()), 0} // two 1×1 outputs
	SgemmBatched(NoTrans, NoTrans, 2, 1, Strided{General{1, 2, 2, a}, 2}, Strided{General{2, 1, 1, b}, 0}, 0, Strided{General{1, 1, 1, c}, 1})
	if c[0] != 50 || c[1] != 110 {
		t.Errorf("shared B: C = %v, want [50 110]", c)
	}
}

// TestBadInput checks that inconsistent arguments panic with a message
// naming the shapes instead of computing garbage or writing out of bounds.
func TestBadInput(t *testing.T) {
	buf := func(n int) []float32 { return make([]float32, n) }
	cases := []struct {
		name string
		call func()
		want string
	}{
		{"short a", func() {
			Sgemm(NoTrans, NoTrans, 1, General{4, 2, 2, buf(7)}, General{2, 3, 3, buf(6)}, 0, General{4, 3, 3, buf(12)})
		}, "a is 4×2 with Stride=2: len(Data)=7, want ≥ 8"},
		{"short b", func() {
			Sgemm(NoTrans, Trans, 1, General{4, 2, 2, buf(8)}, General{3, 2, 2, buf(5)}, 0, General{4, 3, 3, buf(12)})
		}, "b is 3×2 with Stride=2: len(Data)=5, want ≥ 6"},
		{"short c", func() {
			SgemmSerial(Trans, NoTrans, 1, General{2, 4, 4, buf(8)}, General{2, 3, 3, buf(6)}, 0, General{4, 3, 4, buf(13)})
		}, "c is 4×3 with Stride=4: len(Data)=13, want ≥ 15"},
		{"small stride a", func() {
			Sgemm(NoTrans, NoTrans, 1, General{4, 2, 1, buf(100)}, General{2, 3, 3, buf(100)}, 0, General{4, 3, 3, buf(100)})
		}, "a is 4×2 with Stride=1 < 2 columns"},
		{"small stride b", func() {
			Sgemm(NoTrans, Trans, 1, General{4, 2, 2, buf(100)}, General{3, 2, 1, buf(100)}, 0, General{4, 3, 3, buf(100)})
		}, "b is 3×2 with Stride=1 < 2 columns"},
		{"small stride c", func() {
			Sgemm(NoTrans, NoTrans, 1, General{4, 2, 2, buf(100)}, General{2, 3, 3, buf(100)}, 0, General{4, 3, 2, buf(100)})
		}, "c is 4×3 with Stride=2 < 3 columns"},
		{"negative", func() {
			Sgemm(NoTrans, NoTrans, 1, General{-1, 2, 2, nil}, General{2, 3, 3, nil}, 0, General{-1, 3, 3, nil})
		}, "a is -1×2: negative dimension"},
		{"bad transpose", func() {
			Sgemm('X', NoTrans, 1, General{1, 1, 1, buf(1)}, General{1, 1, 1, buf(1)}, 0, General{1, 1, 1, buf(1)})
		}, "bad tA 'X'"},
		{"mismatch k", func() {
			Sgemm(NoTrans, Trans, 1, General{4, 2, 2, buf(8)}, General{3, 3, 3, buf(9)}, 0, General{4, 3, 3, buf(12)})
		}, "Sgemm(NT): op(a) is 4×2, op(b) is 3×3, c is 4×3: shapes do not match"},
		{"mismatch m", func() {
			SgemmSerial(Trans, NoTrans, 1, General{2, 4, 4, buf(8)}, General{2, 3, 3, buf(6)}, 0, General{5, 3, 3, buf(15)})
		}, "SgemmSerial(TN): op(a) is 4×2, op(b) is 2×3, c is 5×3"},
		{"batched short c", func() {
			SgemmBatched(NoTrans, NoTrans, 3, 1, Strided{General{2, 2, 2, buf(12)}, 4}, Strided{General{2, 2, 2, buf(12)}, 4}, 0, Strided{General{2, 2, 2, buf(11)}, 4})
		}, "c is 3 2×2 matrices with Stride=2, Step=4: len(Data)=11, want ≥ 12"},
		{"batched overlap", func() {
			SgemmBatched(NoTrans, NoTrans, 3, 1, Strided{General{2, 2, 2, buf(12)}, 4}, Strided{General{2, 2, 2, buf(12)}, 4}, 0, Strided{General{2, 2, 2, buf(12)}, 3})
		}, "c has Step=3 < 4: the 2×2 outputs with Stride=2 overlap"},
		{"batched mismatch", func() {
			SgemmBatched(NoTrans, NoTrans, 3, 1, Strided{General{2, 2, 2, buf(12)}, 4}, Strided{General{3, 2, 2, buf(18)}, 6}, 0, Strided{General{2, 2, 2, buf(12)}, 4})
		}, "SgemmBatched(NN): op(a) is 2×2, op(b) is 3×2, c is 2×2"},
		{"batched negative step", func() {
			SgemmBatched(NoTrans, NoTrans, 3, 1, Strided{General{2, 2, 2, buf(12)}, -4}, Strided{General{2, 2, 2, buf(12)}, 4}, 0, Strided{General{2, 2, 2, buf(12)}, 4})
		}, "a has Step=-4: negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if r == nil || !strings.Contains(msg, c.want) {
					t.Errorf("panic %v, want one containing %q", r, c.want)
				}
			}()
			c.call()
		})
	}
}

// FuzzSgemm checks arbitrary shapes, transposes and leading dimensions
// against the reference on every kernel.
func FuzzSgemm(f *testing.F) {
	f.Add(uint8(3), uint8(5), uint8(7), uint8(0), uint8(0), uint8(1), uint64(1))
	f.Add(uint8(15), uint8(33), uint8(1), uint8(1), uint8(2), uint8(0), uint64(2))
	f.Add(uint8(29), uint8(2), uint8(40), uint8(2), uint8(5), uint8(2), uint64(3))
	f.Add(uint8(1), uint8(64), uint8(0), uint8(3), uint8(1), uint8(3), uint64(4))
	f.Fuzz(func(t *testing.T, m, n, k, tr, pad, ab uint8, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 0))
		scalars := [][2]float32{{1, 0}, {1, 1}, {-2, 0.5}, {0, 3}}
		s := scalars[int(ab)%len(scalars)]
		x := transposes[tr%4]
		p := newProblem(rng, x[0], x[1], int(m%70), int(n%70), int(k%70), s[0], s[1], int(pad%4))
		defer func(k *kernel) { active = k }(active)
		for _, kn := range kernels() {
			for _, kk := range []*kernel{kn, tiny(kn)} {
				active = kk
				p.check(t, kk.name, sgemm)
			}
		}
	})
}

func TestNoAsmEnv(t *testing.T) {
	t.Setenv("POLYSKETCH_NOASM", "1")
	if k := choose(); k != goKernel {
		t.Errorf("POLYSKETCH_NOASM=1 chose %s, want %s", k.name, goKernel.name)
	}
	t.Setenv("POLYSKETCH_NOASM", "")
	for _, want := range kernels() {
		t.Setenv("POLYSKETCH_KERNEL", want.name)
		if k := choose(); k != want {
			t.Errorf("POLYSKETCH_KERNEL=%s chose %s", want.name, k.name)
		}
	}
	t.Setenv("POLYSKETCH_KERNEL", "")
	if k := choose(); k != kernels()[0] {
		t.Errorf("default chose %s, want %s", k.name, kernels()[0].name)
	}
}

// TestSgemmSmall checks the products that skip packing (small.go) on each
// kernel: at both sides of every threshold and tile size, for every
// transpose form, with strided views, beta = 0 over NaNs, and k tails that
// leave partial vectors. It also checks that each way of skipping packing
// was taken.
func TestSgemmSmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	scalars := [][2]float32{{1, 0}, {-0.5, 1.5}}
	eachKernel(t, func(t *testing.T) {
		kn := active
		// Few rows: m at the thresholds and row-group edges, n at the
		// tile edges.
		ms := []int{1, 2, kn.srows, kn.srows + 1, kn.drows + 1, kn.streamMax, kn.streamMax + 1, kn.dotsMax, kn.dotsMax + 1}
		ns := []int{dotCols - 1, dotCols, dotCols + 1, kn.sw - 1, kn.sw, kn.sw + 1, 2*kn.sw + 3}
		if kn.ww > 0 { // one or two rows: wide tiles, then stream tiles
			ns = append(ns, kn.ww, 2*kn.ww+kn.sw+1)
		}
		ks := []int{1, 7, 17, 40}
		if testing.Short() {
			ks = []int{7, 17}
		}
		var cases [][3]int
		for _, m := range ms {
			for _, n := range ns {
				for _, k := range ks {
					cases = append(cases, [3]int{m, n, k}, [3]int{n, m, k}) // and few columns
				}
			}
		}
		seen := map[smallForm]bool{}
		for _, s := range cases {
			for _, tr := range transposes {
				for i, ab := range scalars {
					p := newProblem(rng, tr[0], tr[1], s[0], s[1], s[2], ab[0], ab[1], 3*i)
					g := gemm{kn: kn, tA: p.tA, tB: p.tB, m: p.m, n: p.n, k: p.k}
					seen[g.form()] = true
					p.check(t, "Sgemm", sgemm)
					p.check(t, "SgemmSerial", sgemmSerial)
				}
			}
		}
		for _, f := range []smallForm{packed, streamRows, dotRows, dotColumns, streamTall} {
			if !seen[f] && (f != streamTall || kn.narrowN > 0) {
				t.Errorf("no case computed as form %d", f)
			}
		}
	})
}

// TestSmallDeterminism checks that splitting the products that skip
// packing between goroutines does not change a bit.
func TestSmallDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	eachKernel(t, func(t *testing.T) {
		for _, s := range [][3]int{{3, 1001, 97}, {1, 2085, 130}, {1003, 3, 100}, {2, 4100, 600}} {
			for _, tr := range transposes {
				p := newProblem(rng, tr[0], tr[1], s[0], s[1], s[2], 1.5, 0.25, 1)
				var results [][]float32
				for _, procs := range parallel.TestThreads {
					runtime.GOMAXPROCS(procs)
					c := append([]float32(nil), p.c...)
					sgemm(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
					results = append(results, c)
				}
				c := append([]float32(nil), p.c...)
				sgemmSerial(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
				results = append(results, c)
				for r := 1; r < len(results); r++ {
					for i := range c {
						if math.Float32bits(results[r][i]) != math.Float32bits(results[0][i]) {
							t.Fatalf("%v: run %d differs from GOMAXPROCS=1 at %d: %v vs %v", p, r, i, results[r][i], results[0][i])
						}
					}
				}
			}
		}
	})
}

// TestSmallAllocs checks that the products that skip packing, including
// those that copy a small operand, do not allocate on one goroutine.
func TestSmallAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	rng := rand.New(rand.NewPCG(17, 18))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(1)
	eachKernel(t, func(t *testing.T) {
		for _, s := range [][3]int{{1, 2 * active.sw, 64}, {2, 9, 64}, {9, 2, 64}} {
			for _, tr := range transposes {
				p := newProblem(rng, tr[0], tr[1], s[0], s[1], s[2], 1, 0, 0)
				for name, f := range map[string]sgemmFunc{"Sgemm": sgemm, "SgemmSerial": sgemmSerial} {
					n := testing.AllocsPerRun(20, func() {
						f(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, p.c, p.ldc)
					})
					if n != 0 {
						t.Errorf("%s %v: %v allocations per call, want 0", name, p, n)
					}
				}
			}
		}
	})
}

// TestRowBlock checks what RowBlock promises: in products of up to
// RowBlock rows, each row of C has the same bits as when it is computed
// alone, whatever the other rows.
func TestRowBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	eachKernel(t, func(t *testing.T) {
		for _, s := range [][2]int{{5, 40}, {31, 64}, {32, 256}, {100, 1000}, {768, 1024}} {
			n, k := s[0], s[1]
			R := RowBlock(n)
			for _, tB := range []Transpose{NoTrans, Trans} {
				a := make([]float32, R*k)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
				}
				b := make([]float32, k*n)
				for i := range b {
					b[i] = float32(rng.NormFloat64())
				}
				ldb := n
				if tB == Trans {
					ldb = k
				}
				alone := make([]float32, R*n)
				for i := range R {
					sgemm(NoTrans, tB, 1, n, k, 1, a[i*k:], k, b, ldb, 0, alone[i*n:], n)
				}
				for m := 2; m <= RowBlock(n); m++ {
					c := make([]float32, m*n)
					sgemm(NoTrans, tB, m, n, k, 1, a, k, b, ldb, 0, c, n)
					for i, v := range c {
						if math.Float32bits(v) != math.Float32bits(alone[i]) {
							t.Fatalf("N%c n=%d k=%d: row %d of %d rows: C[%d] = %v, alone %v", tB, n, k, i/n, m, i%n, v, alone[i])
						}
					}
				}
			}
		}
	})
}
