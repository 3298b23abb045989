package blas

import "fmt"

// General is a row-major float32 matrix view, in the shape of gonum's
// blas32.General: element (i, j) is Data[i·Stride + j]. It is the one
// way a matrix crosses this package's API; a view of part of a matrix is
// the same value with Data starting at its first element.
type General struct {
	Rows, Cols, Stride int
	Data               []float32
}

// NewGeneral returns the rows×cols matrix stored densely, row after row,
// from the start of data: the view whose Stride is cols.
func NewGeneral(rows, cols int, data []float32) General {
	return General{Rows: rows, Cols: cols, Stride: cols, Data: data}
}

// Strided is a batch of matrices of one shape laid out in one slice at a
// fixed distance: matrix i is General with Data starting at i·Step. Step
// 0 repeats one matrix for every product of the batch (a shared weight).
type Strided struct {
	General     // matrix 0
	Step    int // elements from one matrix to the next
}

// Slice returns the view of rows [i, k) and columns [j, l) of m, sharing
// its data, as gonum's mat.Dense.Slice does. Bounds outside m panic.
func (m General) Slice(i, k, j, l int) General {
	if i < 0 || k < i || k > m.Rows || j < 0 || l < j || l > m.Cols {
		panic(fmt.Sprintf("blas: General.Slice(%d, %d, %d, %d) of a %d×%d matrix: out of bounds", i, k, j, l, m.Rows, m.Cols))
	}
	if i == k || j == l {
		return General{Rows: k - i, Cols: l - j, Stride: m.Stride}
	}
	return General{Rows: k - i, Cols: l - j, Stride: m.Stride, Data: m.Data[i*m.Stride+j:]}
}

// shape panics unless m's dimensions and stride are valid.
func (m General) shape(fn, name string) {
	if m.Rows < 0 || m.Cols < 0 {
		panic(fmt.Sprintf("blas: %s: %s is %d×%d: negative dimension", fn, name, m.Rows, m.Cols))
	}
	if m.Stride < max(1, m.Cols) {
		panic(fmt.Sprintf("blas: %s: %s is %d×%d with Stride=%d < %d columns", fn, name, m.Rows, m.Cols, m.Stride, m.Cols))
	}
}

// check panics unless m is a valid view of a Rows×Cols matrix.
func (m General) check(fn, name string) {
	m.shape(fn, name)
	if sz := need(m.Rows, m.Cols, m.Stride); len(m.Data) < sz {
		panic(fmt.Sprintf("blas: %s: %s is %d×%d with Stride=%d: len(Data)=%d, want ≥ %d", fn, name, m.Rows, m.Cols, m.Stride, len(m.Data), sz))
	}
}

// check panics unless s holds batch valid views.
func (s Strided) check(fn, name string, batch int) {
	s.shape(fn, name)
	if s.Step < 0 {
		panic(fmt.Sprintf("blas: %s: %s has Step=%d: negative", fn, name, s.Step))
	}
	if sz := need(s.Rows, s.Cols, s.Stride); batch > 0 && sz > 0 && len(s.Data) < (batch-1)*s.Step+sz {
		panic(fmt.Sprintf("blas: %s: %s is %d %d×%d matrices with Stride=%d, Step=%d: len(Data)=%d, want ≥ %d",
			fn, name, batch, s.Rows, s.Cols, s.Stride, s.Step, len(s.Data), (batch-1)*s.Step+sz))
	}
}

func checkTrans(fn, name string, t Transpose) {
	if t != NoTrans && t != Trans {
		panic(fmt.Sprintf("blas: %s: bad %s %q", fn, name, byte(t)))
	}
}

// checkGemm checks the arguments of a product and returns its m, n, k.
func checkGemm(fn string, tA, tB Transpose, a, b, c General) (m, n, k int) {
	checkTrans(fn, "tA", tA)
	checkTrans(fn, "tB", tB)
	a.check(fn, "a")
	b.check(fn, "b")
	c.check(fn, "c")
	return dims(fn, tA, tB, a, b, c)
}

// dims checks that op(a)·op(b) fits c and returns the product's m, n and
// k.
func dims(fn string, tA, tB Transpose, a, b, c General) (m, n, k int) {
	am, ak := stored(tA, a.Rows, a.Cols)
	bk, bn := stored(tB, b.Rows, b.Cols)
	if am != c.Rows || bn != c.Cols || ak != bk {
		panic(fmt.Sprintf("blas: %s(%c%c): op(a) is %d×%d, op(b) is %d×%d, c is %d×%d: shapes do not match",
			fn, tA, tB, am, ak, bk, bn, c.Rows, c.Cols))
	}
	return c.Rows, c.Cols, ak
}
