package nn

import (
	"fmt"

	"github.com/polysketch/polysketch/internal/parallel"
	"github.com/polysketch/polysketch/tensor"
	"github.com/polysketch/polysketch/vec"
)

const (
	// minChunk is the least number of elements worth handing to a goroutine
	// for elementwise row work; below it the fan-out costs more than it saves.
	minChunk = 1 << 14
	// reduceRows is the number of rows summed into one partial result of a
	// reduction over rows. It is a constant, not derived from GOMAXPROCS, so
	// the order of every sum is fixed.
	reduceRows = 64
)

// rowsOf returns the number of rows of t seen as a matrix with cols
// columns, panicking if its last dimension is not cols.
func rowsOf(op, name string, t *tensor.Tensor, cols int) int {
	if t.Dims() == 0 || cols <= 0 || t.Dim(-1) != cols {
		panic(fmt.Sprintf("nn.%s: %s has shape %v, want last dimension %d", op, name, t.Shape, cols))
	}
	return t.Len() / cols
}

// checkRows panics unless t is a matrix of rows×cols (any leading shape).
func checkRows(op, name string, t *tensor.Tensor, rows, cols int) {
	if r := rowsOf(op, name, t, cols); r != rows {
		panic(fmt.Sprintf("nn.%s: %s has shape %v (%d rows of %d), want %d rows", op, name, t.Shape, r, cols, rows))
	}
}

// chunks returns how many items rows×cols elementwise work is split
// into: a few per thread, so that the pool can even out uneven threads,
// each of at least minChunk elements and one row.
func chunks(rows, cols int) int {
	return max(1, min(rows, parallel.Chunks(rows*cols, minChunk, parallel.Threads())))
}

// forRows runs fn over [0, rows) split into chunks(rows, cols) ranges; see
// splitRows.
func forRows(rows, cols int, fn func(w, lo, hi int)) {
	splitRows(chunks(rows, cols), rows, fn)
}

// splitRows splits [0, rows) into n contiguous ranges and calls fn(w, lo,
// hi) for each on the process's pool; w < n identifies the goroutine, for
// scratch of its own. fn must treat rows independently, so that the split
// cannot change results.
func splitRows(n, rows int, fn func(w, lo, hi int)) {
	parallel.Run(n, n, func(w, c int) {
		fn(w, c*rows/n, (c+1)*rows/n)
	})
}

// blocks returns the number of reduceRows-row blocks covering rows.
func blocks(rows int) int { return (rows + reduceRows - 1) / reduceRows }

// addColSums adds the column sums of the rows×cols matrix m to dst. Rows are
// summed in fixed blocks (in parallel) and the block sums in block order,
// so the result does not depend on the number of threads. partial is
// scratch, grown as needed and returned.
func addColSums(dst, m []float32, rows, cols int, partial []float32) []float32 {
	nb := blocks(rows)
	partial = tensor.Grow(partial, nb*cols)
	parallel.For(nb, func(b int) {
		p := partial[b*cols : (b+1)*cols]
		lo, hi := b*reduceRows, min((b+1)*reduceRows, rows)
		copy(p, m[lo*cols:(lo+1)*cols])
		vec.AddRows(p, m[(lo+1)*cols:], cols, hi-lo-1)
	})
	vec.AddRows(dst, partial, cols, nb)
	return partial
}

// ones returns buf resized to n elements, all 1: with vec.Axpy(c, ones, x)
// it adds the constant c to x.
func ones(buf []float32, n int) []float32 {
	if len(buf) == n {
		return buf
	}
	buf = tensor.Grow(buf, n)
	for i := range buf {
		buf[i] = 1
	}
	return buf
}
