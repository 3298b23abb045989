package serve

import (
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/sample"
)

// BenchmarkStepSampling times, for 16 sequences of DefaultConfig with
// GPT-2's vocabulary (50257), one batched model step ("step") and the
// scheduler's sampling of the step's 16 tokens per setting: sampling's
// share of a step is the ratio. The logits are the untrained model's,
// nearly flat, which is the worst case of top_p (its nucleus is most of
// the vocabulary); "peaked" rows scale them by 12, about as peaked as a
// trained model's. "logprobs=5" is the work the request handlers do per
// step for logprobs, off the scheduler's goroutine.
func BenchmarkStepSampling(b *testing.B) {
	const S = 16
	c := model.DefaultConfig()
	c.Vocab = 50257
	m, err := model.New(c)
	if err != nil {
		b.Fatal(err)
	}
	batch := m.NewBatch()
	seqs := make([]*model.Sequence, S)
	toks := make([][]int32, S)
	for i := range seqs {
		if seqs[i], err = m.NewSequence(); err != nil {
			b.Fatal(err)
		}
		toks[i] = []int32{int32(i)}
	}
	step := func() []float32 {
		out, err := batch.Step(seqs, toks)
		if err != nil {
			b.Fatal(err)
		}
		return out.Data
	}
	for range 64 {
		step()
	}
	flat := append([]float32(nil), step()...)
	peaked := make([]float32, len(flat))
	for i, l := range flat {
		peaked[i] = 12 * l
	}
	b.Run("step", func(b *testing.B) {
		for b.Loop() {
			step()
		}
	})
	for _, tc := range []struct {
		name        string
		temperature float64
		topP        float64
		topK        int
	}{
		{"greedy", 0, 1, 0},
		{"temperature=1", 1, 1, 0},
		{"top_k=40", 1, 1, 40},
		{"top_p=0.95,T=0.8", 0.8, 0.95, 0},
	} {
		for _, rows := range []struct {
			name   string
			logits []float32
		}{{"flat", flat}, {"peaked", peaked}} {
			b.Run("sample/"+tc.name+"/"+rows.name, func(b *testing.B) {
				s := &scheduler{}
				for i := range S {
					s.stepJ = append(s.stepJ, &job{sampler: sample.New(sample.Settings{Temperature: tc.temperature, TopP: tc.topP, TopK: tc.topK}, rand.New(rand.NewPCG(1, uint64(i))))})
					s.drawn = append(s.drawn, i)
					s.last = append(s.last, i) // job i's logits are row i
				}
				for b.Loop() {
					s.sample(rows.logits, c.Vocab)
				}
			})
		}
	}
	b.Run("logprobs=5", func(b *testing.B) {
		for b.Loop() {
			for i := range S {
				t := &tokenLogprobs{logits: rowPool.get(c.Vocab), toks: []int32{1}, offsets: []int{0}, top: 5, tk: tokenizer.Byte}
				copy(t.logits, peaked[i*c.Vocab:(i+1)*c.Vocab])
				t.compute()
			}
		}
	})
}
