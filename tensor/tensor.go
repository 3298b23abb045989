// Package tensor provides the dense float32 tensor used throughout polysketch:
// a shape and row-major contiguous storage, views over leading dimensions that
// share storage, and buffer reuse so hot loops allocate nothing.
package tensor

import (
	"fmt"

	"github.com/polysketch/polysketch/internal/hugepage"
	"github.com/polysketch/polysketch/vec"
)

// Tensor is a dense row-major float32 array. Data holds exactly the product of
// Shape elements; a view made by Index or Reshape shares Data with its parent.
type Tensor struct {
	Shape []int
	Data  []float32
}

// New returns a zeroed tensor of the given shape.
func New(shape ...int) *Tensor {
	n := volume(shape)
	return &Tensor{Shape: append([]int(nil), shape...), Data: hugepage.Make[float32](n)}
}

// From wraps data as a tensor of the given shape without copying.
// It panics if len(data) is not the product of shape.
func From(data []float32, shape ...int) *Tensor {
	if n := volume(shape); n != len(data) {
		panic(fmt.Sprintf("tensor.From: shape %v needs %d elements, data has %d", shape, n, len(data)))
	}
	return &Tensor{Shape: append([]int(nil), shape...), Data: data}
}

func volume(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			// Copy so that shape does not escape: callers pass variadic shapes.
			panic(fmt.Sprintf("tensor: negative dimension in shape %v", append([]int(nil), shape...)))
		}
		n *= d
	}
	return n
}

// Len is the number of elements.
func (t *Tensor) Len() int { return len(t.Data) }

// Dims is the number of dimensions.
func (t *Tensor) Dims() int { return len(t.Shape) }

// Dim returns the size of dimension i; negative i counts from the end.
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.Shape)
	}
	return t.Shape[i]
}

// Index returns the view t[i] over the leading dimension, sharing storage:
// a [B,H,N,h] tensor indexed twice gives the [N,h] matrix of one head.
func (t *Tensor) Index(i int) *Tensor {
	if len(t.Shape) == 0 || i < 0 || i >= t.Shape[0] {
		panic(fmt.Sprintf("tensor.Index: index %d out of range for shape %v", i, t.Shape))
	}
	stride := volume(t.Shape[1:])
	return &Tensor{Shape: t.Shape[1:len(t.Shape):len(t.Shape)], Data: t.Data[i*stride : (i+1)*stride : (i+1)*stride]}
}

// Reshape returns a view with a new shape and the same elements. One
// dimension may be -1 and is then inferred.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	shape = append([]int(nil), shape...)
	infer, known := -1, 1
	for i, d := range shape {
		if d == -1 {
			if infer >= 0 {
				panic(fmt.Sprintf("tensor.Reshape: more than one -1 in %v", shape))
			}
			infer = i
			continue
		}
		known *= d
	}
	if infer >= 0 && known > 0 {
		shape[infer] = len(t.Data) / known
	}
	if volume(shape) != len(t.Data) {
		panic(fmt.Sprintf("tensor.Reshape: cannot view shape %v (%d elements) as %v", t.Shape, len(t.Data), shape))
	}
	return &Tensor{Shape: shape, Data: t.Data}
}

// Matrix returns the tensor seen as a matrix: all leading dimensions
// collapsed into rows, the last dimension as columns.
func (t *Tensor) Matrix() (rows, cols int) {
	if len(t.Shape) == 0 {
		return 1, 1
	}
	cols = t.Shape[len(t.Shape)-1]
	if cols == 0 {
		return volume(t.Shape[:len(t.Shape)-1]), 0
	}
	return len(t.Data) / cols, cols
}

// Resize makes t the given shape, reusing its storage when it is large
// enough. The contents are unspecified afterwards; call Zero if needed.
func (t *Tensor) Resize(shape ...int) {
	n := volume(shape)
	t.Data = Grow(t.Data, n)
	t.Shape = append(t.Shape[:0], shape...)
}

// Grow returns buf resliced to length n, reallocating only when its capacity
// is too small. It is the building block of allocation-free hot loops. A
// new buffer has exactly n elements, so that what a layer or mechanism
// reports it holds (attention's Workspace) is what it allocates; callers
// that grow step by step grow geometrically themselves.
func Grow(buf []float32, n int) []float32 {
	return hugepage.Grow(buf, n)
}

// Zero sets every element to 0.
func (t *Tensor) Zero() { clear(t.Data) }

// Fill sets every element to v.
func (t *Tensor) Fill(v float32) {
	for i := range t.Data {
		t.Data[i] = v
	}
}

// CopyFrom copies src into t; the shapes must have equal volume.
func (t *Tensor) CopyFrom(src *Tensor) {
	if len(t.Data) != len(src.Data) {
		panic(fmt.Sprintf("tensor.CopyFrom: shape %v into %v", src.Shape, t.Shape))
	}
	copy(t.Data, src.Data)
}

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Shape: append([]int(nil), t.Shape...), Data: append([]float32(nil), t.Data...)}
}

// SameShape reports whether a and b have identical shapes.
func SameShape(a, b *Tensor) bool {
	if len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	return true
}

// CheckFinite returns an error naming the first NaN or Inf element, for
// validating data that came from users.
func (t *Tensor) CheckFinite(name string) error {
	// vec.NonFinite sums the elements with vector instructions and looks
	// for the element only when the sum is not finite: a checkpoint's
	// weights are checked at several GB/s, five times as fast as a test
	// of each value.
	if i := vec.NonFinite(t.Data); i >= 0 {
		return fmt.Errorf("%s: element %d of shape %v is %v; inputs must be finite", name, i, t.Shape, t.Data[i])
	}
	return nil
}

// String summarizes the tensor for debugging.
func (t *Tensor) String() string {
	const show = 6
	if len(t.Data) <= show {
		return fmt.Sprintf("Tensor%v%v", t.Shape, t.Data)
	}
	return fmt.Sprintf("Tensor%v%v…", t.Shape, t.Data[:show])
}
