package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/optim"
)

// BenchmarkTrainStep times Loss+Backward of DefaultConfig (and of the same
// model with the other mechanisms) on a batch of B = 8 windows of the full
// context, reporting training tokens per second.
func BenchmarkTrainStep(b *testing.B) {
	const B = 8
	for _, kind := range attention.Names() {
		b.Run(kind, func(b *testing.B) {
			c := configFor(kind)
			m := mustNew(b, c)
			N := c.Context
			rng := rand.New(rand.NewPCG(1, 1))
			tokens, targets := randomTokens(rng, B*N, c.Vocab), randomTokens(rng, B*N, c.Vocab)
			m.Loss(tokens, targets, B, N)
			m.Backward()
			b.ResetTimer()
			for b.Loop() {
				m.Loss(tokens, targets, B, N)
				m.Backward()
			}
			b.ReportMetric(float64(b.N*B*N)/b.Elapsed().Seconds(), "tokens/s")
			optim.ZeroGrad(m.Params())
		})
	}
}

// BenchmarkDecode times decoding steps of DefaultConfig for B sequences
// at positions [pos, pos+64), reporting generated tokens per second:
// polysketch costs the same at every position, flash's KV cache grows
// linearly.
func BenchmarkDecode(b *testing.B) {
	const window = 64
	for _, B := range []int{1, 8} {
		for _, kind := range []string{"polysketch", "flash"} {
			for _, pos := range []int{0, 256, 1024} {
				decodeBench(b, B, kind, pos, window)
			}
		}
	}
}

func decodeBench(b *testing.B, B int, kind string, pos, window int) {
	b.Run(fmt.Sprintf("B=%d/%s/pos=%d", B, kind, pos), func(b *testing.B) {
		c := configFor(kind)
		c.Context = pos + window
		m := mustNew(b, c)
		dec, err := m.NewDecoder(B)
		if err != nil {
			b.Fatal(err)
		}
		tok := make([]int32, B)
		prefill := func() {
			dec.Reset()
			for range pos {
				if _, err := dec.Step(tok); err != nil {
					b.Fatal(err)
				}
			}
		}
		prefill()
		b.ResetTimer()
		for b.Loop() {
			if dec.Len() == pos+window {
				b.StopTimer()
				prefill()
				b.StartTimer()
			}
			if _, err := dec.Step(tok); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*B)/b.Elapsed().Seconds(), "tokens/s")
	})
}

// configFor returns DefaultConfig with the named mechanism: polysketch
// as by default (learned sketches, blocks of 64), the others with their
// own defaults.
func configFor(kind string) Config {
	c := DefaultConfig()
	if kind != c.Attention.Mechanism() {
		c.Attention, _ = attention.DefaultConfig(kind)
	}
	return c
}
