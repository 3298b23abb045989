package blas

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func threadCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(1, &ru) // RUSAGE_THREAD
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestTune prints single-thread GFLOPS by thread CPU time.
func TestTune(t *testing.T) {
	if os.Getenv("TUNE") == "" {
		t.Skip()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rng := rand.New(rand.NewPCG(1, 1))
	defer func(k *kernel) { active = k }(active)
	shapes := [][3]int{{64, 64, 64}, {256, 64, 256}, {256, 1024, 64}, {1024, 256, 64}, {1024, 1024, 1024}, {512,512,512}}
	for _, kn0 := range kernels() {
		variants := []*kernel{kn0}
		if os.Getenv("TUNE") == "blocks" {
			for _, mc := range []int{kn0.mr * 8, kn0.mr * 16, kn0.mr * 32} {
				for _, kc := range []int{128, 256, 384, 512} {
					v := *kn0
					v.mc, v.kc = mc, kc
					v.name = fmt.Sprintf("%s-mc%d-kc%d", kn0.name, mc, kc)
					variants = append(variants, &v)
				}
			}
		}
		for _, kn := range variants {
			active = kn
			for _, tr := range transposes[:1] {
				for _, s := range shapes {
					m, k, n := s[0], s[1], s[2]
					a, b, c := randSlice(rng, m*k), randSlice(rng, k*n), make([]float32, m*n)
					ldb := n
					if tr[1] == Trans {
						ldb = k
					}
					best := 0.0
					for rep := 0; rep < 5; rep++ {
						t0 := threadCPU()
						calls := 0
						for threadCPU()-t0 < 30*time.Millisecond {
							SgemmSerial(tr[0], tr[1], m, n, k, 1, a, k, b, ldb, 0, c, n)
							calls++
						}
						g := 2 * float64(m*n*k) * float64(calls) / (threadCPU() - t0).Seconds() / 1e9
						best = max(best, g)
					}
					fmt.Printf("%-28s %c%c %5dx%5dx%5d %7.1f\n", kn.name, tr[0], tr[1], m, k, n, best)
				}
			}
		}
	}
}
