package model

import (
	"fmt"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

// The nn layers see activations as rows of features, [B·N, d]; attention
// sees heads, [B,H,N,h]. toHeads and fromHeads move a view of the columns
// of the rows between the two layouts. With grouped-query attention the
// view holds fewer heads (G = cols/h) than the heads tensor (H, a multiple
// of G): toHeads repeats row head j into heads j·H/G … (j+1)·H/G − 1, and
// fromHeads sums those heads back into it. Each is the other's adjoint, so
// each is the other's backward pass: the forward split of q, k, v
// (toHeads) has fromHeads as its backward, and the merge of the attention
// output (fromHeads, H = G) has toHeads.

// toHeads copies the rows matrix src ([B·N, G·h]) into dst ([B,H,N,h]):
// dst[b,i,n,:] = src[b·N+n, (i/g)·h : (i/g+1)·h], g = H/G.
func toHeads(dst *tensor.Tensor, src blas.General) {
	B, H, N, h, g := headShape("toHeads", dst, src)
	parts := headParts(B*H, N, h)
	parallel.Run(B*H*parts, headWorkers(B*H*N*h), func(_, item int) {
		bh, p := item/parts, item%parts
		b, i := bh/H, bh%H/g
		for n := p * N / parts; n < (p+1)*N/parts; n++ {
			at := (b*N+n)*src.Stride + i*h
			copy(dst.Data[(bh*N+n)*h:(bh*N+n+1)*h], src.Data[at:at+h])
		}
	})
}

// fromHeads is the adjoint of toHeads: it writes the heads of src
// ([B,H,N,h]) into the rows matrix dst ([B·N, G·h]), each row head the sum
// of its g = H/G heads in order (a copy when H = G).
func fromHeads(dst blas.General, src *tensor.Tensor) {
	B, H, N, h, g := headShape("fromHeads", src, dst)
	G := H / g
	parts := headParts(B*G, N, h)
	parallel.Run(B*G*parts, headWorkers(B*H*N*h), func(_, item int) {
		bj, p := item/parts, item%parts
		b, j := bj/G, bj%G
		for n := p * N / parts; n < (p+1)*N/parts; n++ {
			at := (b*N+n)*dst.Stride + j*h
			row := dst.Data[at : at+h]
			first := (b*H + j*g) * N
			copy(row, src.Data[(first+n)*h:(first+n+1)*h])
			if g > 1 {
				vec.AddRows(row, src.Data[(first+N+n)*h:], N*h, g-1)
			}
		}
	})
}

// headRows returns where the rows of heads ([B,H,N,h]) lie in the rows
// matrix rows ([B·N, G·h]), as toHeads copies them: row (b, i, n) of
// heads is row head i/g of row b·N+n of rows, g = H/G.
func headRows(op string, heads *tensor.Tensor, rows blas.General) func(r int) []float32 {
	_, H, N, h, g := headShape(op, heads, rows)
	return func(r int) []float32 {
		bi, n := r/N, r%N
		at := (bi/H*N+n)*rows.Stride + bi%H/g*h
		return rows.Data[at : at+h]
	}
}

// headShape returns the shape of heads ([B,H,N,h]) and the heads g of it
// per head of rows, panicking unless rows is a [B·N, G·h] matrix with G
// dividing H.
func headShape(op string, heads *tensor.Tensor, rows blas.General) (B, H, N, h, g int) {
	B, H, N, h = heads.Shape[0], heads.Shape[1], heads.Shape[2], heads.Shape[3]
	if rows.Rows != B*N || rows.Cols%h != 0 || rows.Cols == 0 || H%(rows.Cols/h) != 0 {
		panic(fmt.Sprintf("model.%s: heads %v and a %d×%d rows matrix", op, heads.Shape, rows.Rows, rows.Cols))
	}
	return B, H, N, h, H / (rows.Cols / h)
}

// matrix returns t as a row-major matrix of cols columns.
func matrix(t *tensor.Tensor, cols int) blas.General {
	return blas.NewGeneral(t.Len()/cols, cols, t.Data)
}

// headWorkers returns the goroutines for moving n floats between layouts:
// one below serialHeads floats, as when decoding a token, where handing
// out items costs more than the copy.
func headWorkers(n int) int {
	if n < serialHeads {
		return 1
	}
	return parallel.Threads()
}

// headParts returns into how many parts of their N rows toHeads and
// fromHeads split each of heads heads of size h, so that with few heads
// every thread still has items.
func headParts(heads, N, h int) int {
	want := parallel.Chunks(heads*N*h, serialHeads, headWorkers(heads*N*h))
	return max(1, min(N, want/heads))
}

// serialHeads is the size below which toHeads and fromHeads copy on the
// calling goroutine.
const serialHeads = 1 << 14
