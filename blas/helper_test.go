package blas

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// TestHelperSplit checks the two-way split of one- and two-row products:
// every product gives the bits of SgemmSerial, alone, where the helper
// goroutine must compute some of the halves (else the split is dead
// code), and from goroutines that compete for the helper and the
// processors (the losers run serially, halves the helper cannot start
// are taken back).
func TestHelperSplit(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	kn := kernels()[0]
	if kn.wideRows == 0 {
		t.Skip("no wide kernel on this CPU")
	}
	defer func(k *kernel) { active = k }(active)
	active = kn
	// The products are made first and run back to back, as a decoding
	// step runs them: a parked helper wakes too late for the first.
	products := func(seed uint64) {
		rng := rand.New(rand.NewPCG(21, seed))
		var gs []*gemm
		var wants [][]float32
		for i := range 40 {
			m, n, k := 1+i%2, kn.ww*(2+i%5)+i%3*kn.sw, 256+i
			p := newProblem(rng, NoTrans, NoTrans, m, n, k, 1.5, float32(i%2), 0)
			want := append([]float32(nil), p.c...)
			sgemmSerial(p.tA, p.tB, m, n, k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, want, p.ldc)
			gs = append(gs, &gemm{kn: kn, tA: NoTrans, tB: NoTrans, m: m, n: n, k: k, alpha: p.alpha, beta: p.beta,
				a: p.a, lda: p.lda, b: p.b, ldb: p.ldb, c: p.c, ldc: p.ldc})
			wants = append(wants, want)
		}
		for _, g := range gs {
			if !pairHelper.split(g, streamRows, g.n/kn.ww/2*kn.ww) {
				g.smallRange(streamRows, 0, g.n)
			}
		}
		for i, g := range gs {
			for j, v := range g.c {
				if math.Float32bits(v) != math.Float32bits(wants[i][j]) {
					t.Errorf("m=%d n=%d k=%d: C[%d] = %v, serial %v", g.m, g.n, g.k, j, v, wants[i][j])
					return
				}
			}
		}
	}
	before := pairHelper.ran.Load()
	// Retried, bounded: with fewer cores than threads the helper's thread
	// may not be scheduled during one round.
	for try := 0; try < 50 && pairHelper.ran.Load() == before; try++ {
		products(0)
	}
	if pairHelper.ran.Load() == before {
		t.Error("the helper computed no half")
	}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() { products(uint64(w + 1)) })
	}
	wg.Wait()
}
