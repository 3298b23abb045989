package tensor

import (
	"math"
	"strings"
	"testing"
)

func TestIndexIsAViewOverLeadingDimension(t *testing.T) {
	x := New(2, 3, 4, 5) // [B,H,N,h]
	for i := range x.Data {
		x.Data[i] = float32(i)
	}
	head := x.Index(1).Index(1) // b=1, h=1 → [4,5]
	if got, want := head.Shape, []int{4, 5}; !equalInts(got, want) {
		t.Fatalf("shape %v, want %v", got, want)
	}
	if want := float32((1*3 + 1) * 4 * 5); head.Data[0] != want {
		t.Fatalf("first element %v, want %v", head.Data[0], want)
	}
	head.Data[0] = -1
	if x.Data[(1*3+1)*20] != -1 {
		t.Fatal("Index copied instead of sharing storage")
	}
	// Appending to a view must not write into the parent.
	_ = append(head.Data, 42)
	if x.Data[(1*3+1)*20+20] == 42 {
		t.Fatal("append to a view overwrote the next head")
	}
}

func TestReshape(t *testing.T) {
	x := New(2, 3, 4)
	for _, tc := range []struct {
		in   []int
		want []int
	}{
		{[]int{6, 4}, []int{6, 4}},
		{[]int{-1, 4}, []int{6, 4}},
		{[]int{2, -1}, []int{2, 12}},
		{[]int{24}, []int{24}},
	} {
		y := x.Reshape(tc.in...)
		if !equalInts(y.Shape, tc.want) {
			t.Errorf("Reshape(%v) = %v, want %v", tc.in, y.Shape, tc.want)
		}
		if &y.Data[0] != &x.Data[0] {
			t.Errorf("Reshape(%v) copied the data", tc.in)
		}
	}
}

func TestPanicsNameTheShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func()
		want string
	}{
		{"From", func() { From(make([]float32, 5), 2, 3) }, "[2 3]"},
		{"Reshape", func() { New(2, 3).Reshape(4, 2) }, "[2 3]"},
		{"Reshape two -1", func() { New(2, 3).Reshape(-1, -1) }, "-1"},
		{"Index", func() { New(2, 3).Index(2) }, "[2 3]"},
		{"CopyFrom", func() { New(2, 3).CopyFrom(New(5)) }, "[5]"},
		{"negative", func() { New(2, -1) }, "[2 -1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %q does not mention %q", msg, tc.want)
				}
			}()
			tc.fn()
		})
	}
}

func TestResizeReusesStorage(t *testing.T) {
	x := New(8, 8)
	p := &x.Data[0]
	x.Resize(4, 4)
	if &x.Data[0] != p || x.Len() != 16 || !equalInts(x.Shape, []int{4, 4}) {
		t.Fatalf("Resize to a smaller shape reallocated or has shape %v", x.Shape)
	}
	x.Resize(16, 16)
	if x.Len() != 256 {
		t.Fatalf("Resize to a larger shape: len %d", x.Len())
	}
	if allocs := testing.AllocsPerRun(100, func() { x.Resize(8, 8); x.Resize(16, 16) }); allocs != 0 {
		t.Fatalf("Resize within capacity allocated %v times", allocs)
	}
}

func TestMatrix(t *testing.T) {
	for _, tc := range []struct {
		shape      []int
		rows, cols int
	}{
		{[]int{2, 3, 4}, 6, 4},
		{[]int{5}, 1, 5},
		{[]int{}, 1, 1},
		{[]int{3, 0}, 3, 0},
	} {
		r, c := New(tc.shape...).Matrix()
		if r != tc.rows || c != tc.cols {
			t.Errorf("%v.Matrix() = %d×%d, want %d×%d", tc.shape, r, c, tc.rows, tc.cols)
		}
	}
}

func TestCheckFinite(t *testing.T) {
	x := New(3)
	if err := x.CheckFinite("x"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		x.Data[1] = bad
		err := x.CheckFinite("q")
		if err == nil || !strings.Contains(err.Error(), "q: element 1") {
			t.Errorf("CheckFinite with %v: %v", bad, err)
		}
	}
}

func TestCloneIsDeep(t *testing.T) {
	x := New(2, 2)
	y := x.Clone()
	y.Data[0] = 1
	y.Shape[0] = 9
	if x.Data[0] != 0 || x.Shape[0] != 2 {
		t.Fatal("Clone shares storage or shape")
	}
	if !SameShape(x, New(2, 2)) || SameShape(x, New(4)) {
		t.Fatal("SameShape")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
