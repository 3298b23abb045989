package blas

import (
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
