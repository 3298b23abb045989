package train_test

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/hf"
	"github.com/polysketch/polysketch/optim"
	"github.com/polysketch/polysketch/train"
)

// TestStudentOfImported linearizes the imported fixtures (Llama with
// grouped-query heads and RMSNorm, Qwen2 with q, k, v biases): a student
// whose local softmax block covers the whole sequence is its teacher at
// the start (its temperature starts at softmax's 1/√h, it reads the
// teacher's q, k, v as they are), layer by layer; with blocks shorter
// than the sequence it is not, and attention transfer brings it closer.
func TestStudentOfImported(t *testing.T) {
	for _, name := range []string{"llama", "qwen2"} {
		t.Run(name, func(t *testing.T) {
			imp, err := hf.Read("../hf/testdata/"+name, hf.Options{})
			if err != nil {
				t.Fatal(err)
			}
			teacher := imp.Model
			const B, N = 2, 32
			rng := rand.New(rand.NewPCG(1, 2))
			tokens := make([]int32, B*N)
			for i := range tokens {
				tokens[i] = int32(rng.IntN(teacher.Config().Vocab))
			}
			for _, c := range []struct {
				block int
				exact bool
			}{{N, true}, {8, false}} {
				cfg, err := attention.ParseSpec("polysketch:sketch-size=4:learned:raw-qk:scale:local-softmax:mix")
				if err != nil {
					t.Fatal(err)
				}
				cfg, _ = attention.Set(cfg, "block", strconv.Itoa(c.block))
				s, err := train.Student(teacher, cfg, false)
				if err != nil {
					t.Fatal(err)
				}
				x := train.NewTransfer(teacher, s)
				before := x.Loss(tokens, B, N, false)
				if c.exact {
					for i, e := range x.Layer {
						if e > 1e-10 {
							t.Errorf("one block: layer %d differs from the teacher by %.3g (relative squared error)", i, e)
						}
					}
					continue
				}
				if before < 1e-4 {
					t.Fatalf("blocks of 8: relative error %.3g: the sketch takes no part", before)
				}
				opt, err := optim.NewAdamW(train.NewParams(s, teacher), optim.Config{Beta1: 0.9, Beta2: 0.98, Eps: 1e-8})
				if err != nil {
					t.Fatal(err)
				}
				for range 20 {
					optim.ZeroGrad(s.Params())
					x.Loss(tokens, B, N, true)
					opt.Update(1e-2)
				}
				if after := x.Loss(tokens, B, N, false); !(after < before) {
					t.Errorf("blocks of 8: relative error %.4g before transfer, %.4g after", before, after)
				}
			}
		})
	}
}
