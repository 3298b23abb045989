package model

import (
	"fmt"
	"runtime"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
)

// The nn layers see activations as rows of features, [B·N, d]; attention
// sees heads, [B,H,N,h]. toHeads and fromHeads move a view of d = H·h
// columns of the rows between the two layouts. Each is a permutation, and the adjoint
// of a permutation is its inverse, so each is the other's backward pass:
// the forward split of q, k, v (toHeads) has fromHeads as its backward,
// and the merge of the attention output (fromHeads) has toHeads.

// toHeads copies the rows matrix src ([B·N, H·h]) into dst ([B,H,N,h]):
// dst[b,i,n,:] = src[b·N+n, i·h : (i+1)·h].
func toHeads(dst *tensor.Tensor, src blas.General) {
	B, H, N, h := headShape("toHeads", dst, src)
	parallel.Workers(B*H, headWorkers(B*H*N*h), func(bh int) {
		b, i := bh/H, bh%H
		for n := 0; n < N; n++ {
			at := (b*N+n)*src.Stride + i*h
			copy(dst.Data[(bh*N+n)*h:(bh*N+n+1)*h], src.Data[at:at+h])
		}
	})
}

// fromHeads is the inverse of toHeads: it copies src ([B,H,N,h]) into the
// rows matrix dst ([B·N, H·h]).
func fromHeads(dst blas.General, src *tensor.Tensor) {
	B, H, N, h := headShape("fromHeads", src, dst)
	parallel.Workers(B*H, headWorkers(B*H*N*h), func(bh int) {
		b, i := bh/H, bh%H
		for n := 0; n < N; n++ {
			at := (b*N+n)*dst.Stride + i*h
			copy(dst.Data[at:at+h], src.Data[(bh*N+n)*h:(bh*N+n+1)*h])
		}
	})
}

// headShape returns the shape of heads ([B,H,N,h]), panicking unless rows
// is a [B·N, H·h] matrix.
func headShape(op string, heads *tensor.Tensor, rows blas.General) (B, H, N, h int) {
	B, H, N, h = heads.Shape[0], heads.Shape[1], heads.Shape[2], heads.Shape[3]
	if rows.Rows != B*N || rows.Cols != H*h {
		panic(fmt.Sprintf("model.%s: heads %v and a %d×%d rows matrix", op, heads.Shape, rows.Rows, rows.Cols))
	}
	return B, H, N, h
}

// matrix returns t as a row-major matrix of cols columns.
func matrix(t *tensor.Tensor, cols int) blas.General {
	return blas.NewGeneral(t.Len()/cols, cols, t.Data)
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
