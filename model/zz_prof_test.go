package model

import (
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/polysketch/polysketch/attention"
	"github.com/polysketch/polysketch/optim"
)

func BenchmarkZZProf(b *testing.B) {
	N, _ := strconv.Atoi(os.Getenv("ZN"))
	if N == 0 {
		N = 8192
	}
	B := 32768 / N
	c := DefaultConfig()
	c.Attention = attention.Kind(os.Getenv("ZK"))
	if c.Attention == "" {
		c.Attention = attention.Polysketch
	}
	c.Context = N
	c.Block = 256
	c.Learned = os.Getenv("ZR") == ""
	m := mustNew(b, c)
	rng := rand.New(rand.NewPCG(1, 1))
	tokens, targets := randomTokens(rng, B*N, c.Vocab), randomTokens(rng, B*N, c.Vocab)
	m.Loss(tokens, targets, B, N)
	m.Backward()
	cpu := func() float64 {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
	}
	c0 := cpu()
	b.ResetTimer()
	for b.Loop() {
		m.Loss(tokens, targets, B, N)
		m.Backward()
	}
	b.ReportMetric(float64(b.N*B*N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric((cpu()-c0)/float64(b.N*B*N), "cpu-us/token")
	optim.ZeroGrad(m.Params())
}
