package blas

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSlice checks that a slice views the right elements of its parent,
// that an empty slice is a valid operand, and that bounds outside the
// parent panic with a message naming them.
func TestSlice(t *testing.T) {
	data := make([]float32, 4*6)
	for i := range data {
		data[i] = float32(i)
	}
	m := General{Rows: 4, Cols: 5, Stride: 6, Data: data} // column 5 is padding
	for _, c := range []struct{ i, k, j, l int }{{0, 4, 0, 5}, {1, 3, 2, 5}, {3, 4, 4, 5}, {2, 2, 0, 5}, {0, 4, 3, 3}, {4, 4, 5, 5}} {
		s := m.Slice(c.i, c.k, c.j, c.l)
		if s.Rows != c.k-c.i || s.Cols != c.l-c.j || s.Stride != 6 {
			t.Errorf("Slice%v is %d×%d, stride %d", c, s.Rows, s.Cols, s.Stride)
		}
		s.check("TestSlice", "s")
		for r := 0; r < s.Rows; r++ {
			for q := 0; q < s.Cols; q++ {
				if got, want := s.Data[r*s.Stride+q], data[(c.i+r)*6+c.j+q]; got != want {
					t.Errorf("Slice%v[%d,%d] = %v, want %v", c, r, q, got, want)
				}
			}
		}
	}
	for _, c := range []struct{ i, k, j, l int }{{-1, 2, 0, 1}, {2, 1, 0, 1}, {0, 5, 0, 1}, {0, 1, 3, 2}, {0, 1, 0, 6}} {
		func() {
			defer func() {
				if r, _ := recover().(string); !strings.Contains(r, "of a 4×5 matrix: out of bounds") {
					t.Errorf("Slice%v: panic %q", c, r)
				}
			}()
			m.Slice(c.i, c.k, c.j, c.l)
		}()
	}
}

// TestCopy checks Copy against its definition for both t, on shapes with
// every remainder of the 8×8 transposes and views with strides wider
// than their rows, whose elements beyond the columns must not change;
// and that bad shapes panic.
func TestCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, tr := range []Transpose{NoTrans, Trans} {
		for _, sh := range [][2]int{{1, 1}, {1, 9}, {3, 17}, {4, 8}, {7, 8}, {8, 8}, {9, 16}, {13, 29}, {64, 32}, {33, 64}} {
			for _, pad := range []int{0, 3} {
				a := General{sh[0], sh[1], sh[1] + pad, nil}
				a.Data = randSlice(rng, need(a.Rows, a.Cols, a.Stride))
				br, bc := stored(tr, a.Rows, a.Cols)
				b := General{br, bc, bc + pad, nil}
				b.Data = randSlice(rng, b.Rows*b.Stride)
				before := append([]float32(nil), b.Data...)
				Copy(tr, a, b)
				for i := range b.Rows {
					for j := range b.Stride {
						want := before[i*b.Stride+j]
						switch {
						case j >= b.Cols:
						case tr == Trans:
							want = a.Data[j*a.Stride+i]
						default:
							want = a.Data[i*a.Stride+j]
						}
						if got := b.Data[i*b.Stride+j]; got != want {
							t.Fatalf("Copy(%c) of a %d×%d (stride %d): b[%d][%d] = %v, want %v", tr, a.Rows, a.Cols, a.Stride, i, j, got, want)
						}
					}
				}
			}
		}
	}
	for _, tt := range []struct {
		t    Transpose
		a, b General
	}{
		{Trans, NewGeneral(2, 3, make([]float32, 6)), NewGeneral(2, 3, make([]float32, 6))},
		{NoTrans, NewGeneral(2, 3, make([]float32, 6)), NewGeneral(3, 2, make([]float32, 6))},
		{Trans, NewGeneral(2, 3, make([]float32, 5)), NewGeneral(3, 2, make([]float32, 6))},
		{'x', NewGeneral(1, 1, make([]float32, 1)), NewGeneral(1, 1, make([]float32, 1))},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Copy(%c, %d×%d, %d×%d) with len(a.Data)=%d did not panic", tt.t, tt.a.Rows, tt.a.Cols, tt.b.Rows, tt.b.Cols, len(tt.a.Data))
				}
			}()
			Copy(tt.t, tt.a, tt.b)
		}()
	}
}

// BenchmarkCopy measures transposes of the shapes attention takes: the
// learned sketch's M of a block (64 rows of 32) and its features.
func BenchmarkCopy(b *testing.B) {
	for _, sh := range [][2]int{{64, 32}, {528, 64}} {
		a := NewGeneral(sh[0], sh[1], make([]float32, sh[0]*sh[1]))
		c := NewGeneral(sh[1], sh[0], make([]float32, sh[0]*sh[1]))
		b.Run(fmt.Sprintf("T/%dx%d", sh[0], sh[1]), func(b *testing.B) {
			b.SetBytes(int64(4 * sh[0] * sh[1]))
			for b.Loop() {
				Copy(Trans, a, c)
			}
		})
	}
}
