package model

import (
	"runtime"

	"github.com/polysketch/polysketch/internal/parallel"
)

// The nn layers see activations as rows of features, [B·N, d]; attention
// sees heads, [B,H,N,h]. toHeads and fromHeads move a block of d = H·h
// columns between the two layouts. Each is a permutation, and the adjoint
// of a permutation is its inverse, so each is the other's backward pass:
// the forward split of q, k, v (toHeads) has fromHeads as its backward,
// and the merge of the attention output (fromHeads) has toHeads.

// toHeads copies columns [col, col+H·h) of the rows matrix src ([B·N, ld])
// into dst ([B,H,N,h]): dst[b,i,n,:] = src[b·N+n, col+i·h : col+(i+1)·h].
func toHeads(dst, src []float32, ld, col, B, H, N, h int) {
	parallel.Workers(B*H, headWorkers(B*H*N*h), func(bh int) {
		b, i := bh/H, bh%H
		for n := 0; n < N; n++ {
			at := (b*N+n)*ld + col + i*h
			copy(dst[(bh*N+n)*h:(bh*N+n+1)*h], src[at:at+h])
		}
	})
}

// fromHeads is the inverse of toHeads: it copies src ([B,H,N,h]) into
// columns [col, col+H·h) of the rows matrix dst ([B·N, ld]).
func fromHeads(dst []float32, ld, col int, src []float32, B, H, N, h int) {
	parallel.Workers(B*H, headWorkers(B*H*N*h), func(bh int) {
		b, i := bh/H, bh%H
		for n := 0; n < N; n++ {
			at := (b*N+n)*ld + col + i*h
			copy(dst[at:at+h], src[(bh*N+n)*h:(bh*N+n+1)*h])
		}
	})
}

// headWorkers returns the goroutines for moving n floats between layouts:
// one below serialHeads floats, as when decoding a token, where starting
// goroutines costs more than the copy.
func headWorkers(n int) int {
	if n < serialHeads {
		return 1
	}
	return runtime.GOMAXPROCS(0)
}

// serialHeads is the size below which toHeads and fromHeads copy on the
// calling goroutine.
const serialHeads = 1 << 14
