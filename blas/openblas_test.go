//go:build openblas && cgo

package blas

import (
	"math/rand/v2"
	"testing"
)

// TestOpenBLAS checks the OpenBLAS implementation against the reference,
// like TestSgemm does the package's own.
func TestOpenBLAS(t *testing.T) {
	var ob sgemmFunc
	for _, impl := range Impls() {
		if impl.Name == "openblas" {
			ob = loose(impl.Sgemm)
		}
	}
	if ob == nil {
		t.Fatal("Impls lists no openblas")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, s := range [][3]int{{1, 1, 1}, {3, 0, 2}, {2, 3, 0}, {13, 17, 11}, {64, 65, 66}, {150, 90, 300}} {
		for _, tr := range transposes {
			for _, ab := range [][2]float32{{1, 0}, {2, -1.5}, {0, 0.5}} {
				for _, pad := range []int{0, 3} {
					newProblem(rng, tr[0], tr[1], s[0], s[1], s[2], ab[0], ab[1], pad).check(t, "openblas", ob)
				}
			}
		}
	}
}
