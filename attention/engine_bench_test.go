package attention

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// BenchmarkLinear runs causal Forward+Backward of the linear mechanisms on
// the engine with their default options, two heads of h = 64 (as `bench
// attention`), at 4k, 32k and 64k tokens: µs/token should stay flat. Compare
// within one run.
func BenchmarkLinear(b *testing.B) {
	specs := []string{"polysketch", "elu", "performer", "performer:cumsum"}
	if extra := os.Getenv("LINEAR_SPECS"); extra != "" { // e.g. "elu:block=128,performer:block=128"
		specs = strings.Split(extra, ",")
	}
	for _, spec := range specs {
		for _, N := range []int{4096, 32768, 65536} {
			s := psShape{1, 2, N, 64}
			b.Run(fmt.Sprintf("%s/%v", spec, s), func(b *testing.B) {
				cfg, err := ParseSpec(spec)
				if err != nil {
					b.Fatal(err)
				}
				m, err := New(cfg, Setup{Causal: true, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				benchPass(b, m, s, true, 0)
			})
		}
	}
}
